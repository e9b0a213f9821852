// Decodes in real time from raw 16-bit mono PCM on standard input, one line per frame as soon as it is
// decoded (from the decoder's callback):
//   cc decode_stdin.c $(pkg-config --cflags --libs sotto) -o decode_stdin
//   arecord -q -t raw -f S16_LE -c 1 -r 48000 | ./decode_stdin 48000 [PROFILES]
// PROFILES: comma-separated names or all (default: default). Reads 1024-sample periods (21 ms at 48 kHz).
#include <sotto.h>

#include <stdio.h>
#include <stdlib.h>

static void print_frame(const sotto_frame *frame, void *user_data) {
    (void)user_data;
    printf("%9.3f s  ", frame->start_time_s);
    for (size_t i = 0; i < frame->token_length; i++) printf("%02x", frame->token[i]);
    printf("  profile %s  SNR %.1f dB  level %.1f dBFS  offset %+.0f ppm\n", frame->profile, frame->snr_db,
           frame->level_dbfs, frame->clock_offset_ppm);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: arecord -q -t raw -f S16_LE -c 1 -r RATE | %s RATE_HZ [PROFILES]\n", argv[0]);
        return 2;
    }
    sotto_decoder *decoder;
    if (sotto_decoder_create(atof(argv[1]), argc > 2 ? argv[2] : NULL, &decoder) != SOTTO_OK) {
        fprintf(stderr, "error: %s\n", sotto_thread_error_message());
        return 1;
    }
    sotto_decoder_set_callback(decoder, print_frame, NULL);
    int16_t period[1024];
    size_t count;
    while ((count = fread(period, sizeof period[0], 1024, stdin)) > 0) {
        if (sotto_decoder_feed_int16(decoder, period, count) != SOTTO_OK) {
            fprintf(stderr, "error: %s\n", sotto_decoder_error_message(decoder));
            return 1;
        }
    }
    sotto_decoder_flush(decoder);  // end of input: frames ending at the last sample
    sotto_decoder_destroy(decoder);
    return 0;
}
