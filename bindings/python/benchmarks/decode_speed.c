// Decode speed of libsotto called directly from C: reads raw float32 mono samples from a file, feeds them in
// chunks, and prints the best process CPU time of several runs (s). Built and run by decode_speed.py.
#include <sotto.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: %s SAMPLES.f32 RATE_HZ CHUNK RUNS\n", argv[0]); return 2; }
    FILE *file = fopen(argv[1], "rb");
    if (!file) { perror(argv[1]); return 1; }
    fseek(file, 0, SEEK_END);
    size_t count = (size_t)ftell(file) / sizeof(float);
    fseek(file, 0, SEEK_SET);
    float *samples = malloc(count * sizeof *samples);
    if (fread(samples, sizeof *samples, count, file) != count) { fprintf(stderr, "short read\n"); return 1; }
    fclose(file);
    double rate = atof(argv[2]), best = 1e30;
    size_t chunk = (size_t)atol(argv[3]);
    int runs = atoi(argv[4]), frames = 0;
    for (int run = 0; run < runs; run++) {
        struct timespec start, end;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
        sotto_decoder *decoder;
        sotto_decoder_create(rate, "default", &decoder);
        sotto_frame frame = {.struct_size = sizeof frame};
        frames = 0;
        for (size_t at = 0; at < count; at += chunk) {
            sotto_decoder_feed_float(decoder, samples + at, count - at < chunk ? count - at : chunk);
            while (sotto_decoder_next_frame(decoder, &frame) == SOTTO_OK) frames++;
        }
        sotto_decoder_flush(decoder);
        while (sotto_decoder_next_frame(decoder, &frame) == SOTTO_OK) frames++;
        sotto_decoder_destroy(decoder);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &end);
        double seconds = (double)(end.tv_sec - start.tv_sec) + 1e-9 * (double)(end.tv_nsec - start.tv_nsec);
        if (seconds < best) best = seconds;
    }
    printf("%d %.6f\n", frames, best);
    free(samples);
    return 0;
}
