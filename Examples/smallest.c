// The smallest complete C program: a token into samples and back.
// cc smallest.c $(pkg-config --cflags --libs sotto) -o smallest && ./smallest
#include <sotto.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    sotto_modulator *modulator;
    sotto_decoder *decoder;
    if (sotto_modulator_create("default", 48000, &modulator) != SOTTO_OK ||
        sotto_decoder_create(48000, "default", &decoder) != SOTTO_OK) {
        fprintf(stderr, "%s\n", sotto_thread_error_message());
        return 1;
    }
    size_t count, written;
    sotto_modulator_sample_count(modulator, 5, &count);  // samples a 5-byte token takes
    float *samples = malloc(count * sizeof *samples);
    sotto_modulator_write(modulator, (const uint8_t *)"hello", 5, samples, count, &written);
    sotto_decoder_feed_float(decoder, samples, written);  // any chunk size, any number of calls
    sotto_decoder_flush(decoder);                         // end of stream
    sotto_frame frame = {.struct_size = sizeof frame};
    while (sotto_decoder_next_frame(decoder, &frame) == SOTTO_OK)
        printf("%.*s at %.3f s, profile %s\n", (int)frame.token_length, (const char *)frame.token,
               frame.start_time_s, frame.profile);
    free(samples);
    sotto_decoder_destroy(decoder);
    sotto_modulator_destroy(modulator);
    return 0;
}
