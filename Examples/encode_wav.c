// Encodes a token into a WAV file with libsndfile.
//   cc encode_wav.c $(pkg-config --cflags --libs sotto sndfile) -o encode_wav
//   ./encode_wav "hi there" hi.wav [PROFILE [RATE_HZ [LEVEL_DBFS]]]     (a token of 1-16 bytes; 0x... for hex)
#include <sotto.h>
#include <sndfile.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/// The token's bytes: text as it is, or hex after "0x". Returns the length, or 0 when invalid.
static size_t parse_token(const char *text, uint8_t token[SOTTO_TOKEN_MAX_BYTES]) {
    if (strncmp(text, "0x", 2) != 0) {
        size_t length = strlen(text);
        if (length > SOTTO_TOKEN_MAX_BYTES) return 0;
        memcpy(token, text, length);
        return length;
    }
    size_t digits = strlen(text + 2);
    if (digits % 2 != 0 || digits / 2 > SOTTO_TOKEN_MAX_BYTES) return 0;
    for (size_t i = 0; i < digits / 2; i++) {
        unsigned value;
        if (sscanf(text + 2 + 2 * i, "%2x", &value) != 1) return 0;
        token[i] = (uint8_t)value;
    }
    return digits / 2;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKEN OUT.wav [PROFILE [RATE_HZ [LEVEL_DBFS]]]\n", argv[0]);
        return 2;
    }
    const char *profile = argc > 3 ? argv[3] : "default";
    double rate = argc > 4 ? atof(argv[4]) : 48000, level = argc > 5 ? atof(argv[5]) : SOTTO_DEFAULT_LEVEL_DBFS;
    uint8_t token[SOTTO_TOKEN_MAX_BYTES];
    size_t length = parse_token(argv[1], token);
    if (length == 0) {
        fprintf(stderr, "error: a token is 1 to %d bytes (text, or 0x and hex digits)\n", SOTTO_TOKEN_MAX_BYTES);
        return 2;
    }
    sotto_modulator *modulator;
    if (sotto_modulator_create(profile, rate, &modulator) != SOTTO_OK) {
        fprintf(stderr, "error: %s\n", sotto_thread_error_message());
        return 1;
    }
    size_t count = 0, written = 0;
    float *samples = NULL;
    if (sotto_modulator_set_level(modulator, level) != SOTTO_OK ||
        sotto_modulator_sample_count(modulator, length, &count) != SOTTO_OK ||
        (samples = malloc(count * sizeof *samples)) == NULL ||
        sotto_modulator_write(modulator, token, length, samples, count, &written) != SOTTO_OK) {
        fprintf(stderr, "error: %s\n", samples ? sotto_modulator_error_message(modulator) : "out of memory");
        return 1;
    }
    sotto_modulator_destroy(modulator);

    SF_INFO info = {.samplerate = (int)rate, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    SNDFILE *file = sf_open(argv[2], SFM_WRITE, &info);
    if (file == NULL) {
        fprintf(stderr, "error: %s: %s\n", argv[2], sf_strerror(NULL));
        return 1;
    }
    sf_command(file, SFC_SET_CLIPPING, NULL, SF_TRUE);
    sf_count_t done = sf_writef_float(file, samples, (sf_count_t)written);
    sf_close(file);
    free(samples);
    if (done != (sf_count_t)written) {
        fprintf(stderr, "error: %s: wrote %lld of %zu samples\n", argv[2], (long long)done, written);
        return 1;
    }
    fprintf(stderr, "%s: %zu-byte token, profile %s, %.3f s at %.0f Hz\n", argv[2], length, profile, written / rate, rate);
    return 0;
}
