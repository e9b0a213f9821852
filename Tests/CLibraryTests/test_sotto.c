// Tests of the C API (sotto.h) through the installed libsotto: a C program compiled against the header in
// the test run that encodes, decodes and checks the result, and tries every error path the header names.
// Prints "capi: N passed, N failed" and exits non-zero on any failure.
// Usage: test_sotto [errors | transform-failure]  (transform-failure: under the fault shim, see scripts/test-embedding)
#define _POSIX_C_SOURCE 200809L  // setenv
#include <sotto.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

#define CHECK(condition) check((condition), #condition, __FILE__, __LINE__)
#define CHECK_STATUS(call, expected) check_status((call), (expected), #call, __LINE__)

static void check(int ok, const char *what, const char *file, int line) {
    if (ok) { passed++; return; }
    failed++;
    fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, what);
}

static void check_status(sotto_status got, sotto_status expected, const char *call, int line) {
    if (got == expected) { passed++; return; }
    failed++;
    fprintf(stderr, "test_sotto.c:%d: FAILED: %s returned %d (%s), expected %d (%s); thread message: %s\n", line, call,
            got, sotto_status_name(got), expected, sotto_status_name(expected), sotto_thread_error_message());
}

static const uint8_t token8[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};

/// A burst of `token` at `rate` Hz with `lead` s of silence before and after: *count samples, malloc'd.
static float *burst(const char *profile, double rate, const uint8_t *token, size_t length, double lead, size_t *count) {
    sotto_modulator *modulator = NULL;
    if (sotto_modulator_create(profile, rate, &modulator) != SOTTO_OK) return NULL;
    size_t needed = 0, written = 0, pad = (size_t)(lead * rate);
    sotto_modulator_sample_count(modulator, length, &needed);
    float *samples = calloc(needed + 2 * pad, sizeof(float));
    sotto_status status = sotto_modulator_write(modulator, token, length, samples + pad, needed, &written);
    sotto_modulator_destroy(modulator);
    if (status != SOTTO_OK || written != needed) { free(samples); return NULL; }
    *count = needed + 2 * pad;
    return samples;
}

/// Decodes `samples` fed in chunks of `chunk` samples; returns the frames found (up to `capacity`).
static int decode_chunks(double rate, const char *profiles, const float *samples, size_t count, size_t chunk,
                         sotto_frame *frames, int capacity) {
    sotto_decoder *decoder = NULL;
    if (sotto_decoder_create(rate, profiles, &decoder) != SOTTO_OK) return -1;
    for (size_t start = 0; start < count; start += chunk) {
        size_t n = count - start < chunk ? count - start : chunk;
        if (sotto_decoder_feed_float(decoder, samples + start, n) != SOTTO_OK) { sotto_decoder_destroy(decoder); return -1; }
    }
    sotto_decoder_flush(decoder);
    int found = 0;
    while (found < capacity) {
        frames[found].struct_size = sizeof(sotto_frame);
        if (sotto_decoder_next_frame(decoder, &frames[found]) != SOTTO_OK) break;
        found++;
    }
    sotto_decoder_destroy(decoder);
    return found;
}

static void test_version_and_status_names(void) {
    CHECK(sotto_abi_version() == SOTTO_ABI_VERSION);
    CHECK(strcmp(sotto_version(), SOTTO_VERSION) == 0);
    CHECK(strncmp(sotto_version(), "1.", 2) == 0);
    CHECK(strcmp(sotto_status_name(SOTTO_OK), "ok") == 0);
    CHECK(strcmp(sotto_status_name(SOTTO_ERROR_BUFFER_TOO_SMALL), "buffer too small") == 0);
    CHECK(strcmp(sotto_status_name(SOTTO_ERROR_RESOURCE), "resource unavailable") == 0);
    CHECK(strcmp(sotto_status_name(12345), "unknown status") == 0);
}

static void test_profiles(void) {
    CHECK(sotto_profile_count() == 4);
    const char *names[] = {"default", "fast", "robust", "audible"};
    for (int i = 0; i < 4; i++) {
        sotto_profile_info info = {.struct_size = sizeof info};
        CHECK_STATUS(sotto_profile_get(i, &info), SOTTO_OK);
        CHECK(strcmp(info.name, names[i]) == 0);
        CHECK(info.identifier == i);
        CHECK(info.low_frequency_hz < info.center_frequency_hz && info.center_frequency_hz < info.high_frequency_hz);
        CHECK(fabs(info.symbol_time_s * info.tone_spacing_hz - 1) < 1e-12);
        CHECK(info.minimum_sample_rate_hz > 2 * info.high_frequency_hz);
    }
    sotto_profile_info info = {.struct_size = sizeof info};
    CHECK_STATUS(sotto_profile_find("FAST", &info), SOTTO_OK);
    CHECK(strcmp(info.name, "fast") == 0 && info.tone_spacing_hz == 187.5);
    CHECK(info.low_frequency_hz == 17500 && info.high_frequency_hz == 20500);
    double seconds = 0;
    CHECK_STATUS(sotto_profile_airtime("default", 8, &seconds), SOTTO_OK);
    CHECK(seconds > 0.4 && seconds < 0.6);  // "about 0.5 s for 8 bytes"
    double longer = 0;
    sotto_profile_airtime("default", 16, &longer);
    CHECK(longer > seconds);

    // Errors: each an error code and a message, no crash.
    CHECK_STATUS(sotto_profile_get(-1, &info), SOTTO_ERROR_ARGUMENT);
    CHECK(strstr(sotto_thread_error_message(), "out of range") != NULL);
    CHECK_STATUS(sotto_profile_get(4, &info), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_profile_get(0, NULL), SOTTO_ERROR_NULL);
    sotto_profile_info small = {.struct_size = 3};
    CHECK_STATUS(sotto_profile_get(0, &small), SOTTO_ERROR_STRUCT_SIZE);
    CHECK(strstr(sotto_thread_error_message(), "struct_size") != NULL);
    sotto_profile_info unset = {.struct_size = (size_t)-1};
    CHECK_STATUS(sotto_profile_get(0, &unset), SOTTO_ERROR_STRUCT_SIZE);
    CHECK_STATUS(sotto_profile_find("loud", &info), SOTTO_ERROR_ARGUMENT);
    CHECK(strstr(sotto_thread_error_message(), "unknown profile 'loud'") != NULL);
    CHECK_STATUS(sotto_profile_find(NULL, &info), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_profile_airtime("default", 0, &seconds), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_profile_airtime("default", 17, &seconds), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_profile_airtime("default", (size_t)-1, &seconds), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_profile_airtime("default", 8, NULL), SOTTO_ERROR_NULL);
}

/// The SNR estimated for a clean burst (dB), to compare a noisy one with.
static double clean_snr_db = NAN;

static void test_modulator_round_trip_and_level(void) {
    sotto_modulator *modulator = NULL;
    CHECK_STATUS(sotto_modulator_create(NULL, 48000, &modulator), SOTTO_OK);
    double level = 0;
    CHECK_STATUS(sotto_modulator_get_level(modulator, &level), SOTTO_OK);
    CHECK(level == SOTTO_DEFAULT_LEVEL_DBFS);
    size_t needed = 0, written = 0;
    CHECK_STATUS(sotto_modulator_sample_count(modulator, 8, &needed), SOTTO_OK);
    double airtime = 0;
    sotto_profile_airtime("default", 8, &airtime);
    CHECK(fabs((double)needed - airtime * 48000) <= 1);
    CHECK_STATUS(sotto_modulator_set_level(modulator, -20), SOTTO_OK);
    float *samples = calloc(needed, sizeof(float));
    CHECK_STATUS(sotto_modulator_write(modulator, token8, 8, samples, needed, &written), SOTTO_OK);
    CHECK(written == needed);
    float peak = 0;
    for (size_t i = 0; i < written; i++) peak = fabsf(samples[i]) > peak ? fabsf(samples[i]) : peak;
    CHECK(fabsf(peak - 0.1f) < 0.002f);  // -20 dBFS peak
    sotto_modulator_destroy(modulator);
    free(samples);

    size_t count = 0;
    float *audio = burst("default", 48000, token8, 8, 0.25, &count);
    CHECK(audio != NULL);
    sotto_frame frames[4];
    int found = decode_chunks(48000, NULL, audio, count, 4096, frames, 4);
    CHECK(found == 1);
    if (found >= 1) {
        CHECK(frames[0].token_length == 8 && memcmp(frames[0].token, token8, 8) == 0);
        CHECK(strcmp(frames[0].profile, "default") == 0);
        CHECK(fabs(frames[0].start_time_s - 0.25) < 0.005);
        CHECK(frames[0].end_time_s > frames[0].start_time_s);
        CHECK(isfinite(frames[0].snr_db));
        clean_snr_db = frames[0].snr_db;
        CHECK(fabs(frames[0].level_dbfs - SOTTO_DEFAULT_LEVEL_DBFS) < 1.5);
        CHECK(fabs(frames[0].clock_offset_ppm) < 50);
        CHECK(frames[0].corrected_bits == 0);
    }
    free(audio);
}

static void test_modulator_errors(void) {
    sotto_modulator *modulator = (sotto_modulator *)&passed;  // must be set to NULL on failure
    CHECK_STATUS(sotto_modulator_create("default", 30000, &modulator), SOTTO_ERROR_ARGUMENT);
    CHECK(modulator == NULL);
    CHECK(strstr(sotto_thread_error_message(), "too low") != NULL);
    CHECK_STATUS(sotto_modulator_create("default", NAN, &modulator), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_modulator_create("default", -48000, &modulator), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_modulator_create("nope", 48000, &modulator), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_modulator_create("default", 48000, NULL), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_modulator_create("audible", 16000, &modulator), SOTTO_OK);  // 2-4 kHz fits 16 kHz
    sotto_modulator_destroy(modulator);

    CHECK_STATUS(sotto_modulator_create("fast", 48000, &modulator), SOTTO_OK);
    CHECK(strcmp(sotto_modulator_error_message(modulator), "") == 0);
    CHECK_STATUS(sotto_modulator_set_level(modulator, 3), SOTTO_ERROR_ARGUMENT);
    CHECK(strstr(sotto_modulator_error_message(modulator), "dBFS") != NULL);
    CHECK_STATUS(sotto_modulator_set_level(modulator, NAN), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_modulator_set_level(modulator, -121), SOTTO_ERROR_ARGUMENT);
    double level = 0;
    sotto_modulator_get_level(modulator, &level);
    CHECK(level == SOTTO_DEFAULT_LEVEL_DBFS);  // a refused level changes nothing
    CHECK_STATUS(sotto_modulator_get_level(modulator, NULL), SOTTO_ERROR_NULL);
    size_t needed = 0, written = 99;
    CHECK_STATUS(sotto_modulator_sample_count(modulator, 0, &needed), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_modulator_sample_count(modulator, 17, &needed), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_modulator_sample_count(modulator, 8, NULL), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_modulator_sample_count(modulator, 4, &needed), SOTTO_OK);

    // A buffer one sample short: an error, the length needed, and the buffer untouched.
    float *samples = malloc((needed + 1) * sizeof(float));
    for (size_t i = 0; i <= needed; i++) samples[i] = 7;
    CHECK_STATUS(sotto_modulator_write(modulator, token8, 4, samples, needed - 1, &written), SOTTO_ERROR_BUFFER_TOO_SMALL);
    CHECK(written == needed);
    CHECK(samples[0] == 7 && samples[needed - 2] == 7);
    CHECK(strstr(sotto_modulator_error_message(modulator), "needs") != NULL);
    CHECK_STATUS(sotto_modulator_write(modulator, token8, 4, samples, 0, &written), SOTTO_ERROR_BUFFER_TOO_SMALL);
    CHECK_STATUS(sotto_modulator_write(modulator, token8, 4, samples, (size_t)-1, &written), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_modulator_write(modulator, NULL, 4, samples, needed, &written), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_modulator_write(modulator, token8, 4, NULL, needed, &written), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_modulator_write(modulator, token8, 4, samples, needed, NULL), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_modulator_write(modulator, token8, 0, samples, needed, &written), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_modulator_write(modulator, token8, 17, samples, needed, &written), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_modulator_write(modulator, token8, 4, samples, needed + 1, &written), SOTTO_OK);
    CHECK(written == needed && samples[needed] == 7);  // nothing past the frame
    sotto_modulator_destroy(modulator);

    // A NULL handle: an error code from every call, a message from the thread.
    CHECK_STATUS(sotto_modulator_set_level(NULL, -6), SOTTO_ERROR_NULL);
    CHECK(strstr(sotto_thread_error_message(), "modulator handle") != NULL);
    CHECK_STATUS(sotto_modulator_get_level(NULL, &level), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_modulator_sample_count(NULL, 8, &needed), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_modulator_write(NULL, token8, 8, samples, 10, &written), SOTTO_ERROR_NULL);
    CHECK(sotto_modulator_error_message(NULL) != NULL);
    sotto_modulator_destroy(NULL);
    free(samples);
}

static int callback_frames;
static sotto_frame callback_last;
static sotto_status callback_reentry = SOTTO_OK;

static void on_frame(const sotto_frame *frame, void *user_data) {
    callback_frames++;
    callback_last = *frame;
    sotto_decoder *decoder = user_data;
    float sample = 0;
    callback_reentry = sotto_decoder_feed_float(decoder, &sample, 1);  // refused: must not re-enter
}

static void test_decoder_int16_callback_flush_reset(void) {
    size_t count = 0;
    const uint8_t token[3] = {'a', 'b', 'c'};
    float *audio = burst("robust", 44100, token, 3, 0.2, &count);
    CHECK(audio != NULL);
    int16_t *pcm = malloc(count * sizeof(int16_t));
    for (size_t i = 0; i < count; i++) pcm[i] = (int16_t)lrintf(audio[i] * 32767);

    sotto_decoder *decoder = NULL;
    CHECK_STATUS(sotto_decoder_create(44100, "default, robust", &decoder), SOTTO_OK);
    CHECK_STATUS(sotto_decoder_set_callback(decoder, on_frame, decoder), SOTTO_OK);
    // Odd chunk sizes, the last frame ending right at the end of the stream (found by flush).
    for (size_t start = 0, chunk = 1; start < count; start += chunk, chunk = chunk * 3 + 1) {
        size_t n = count - start < chunk ? count - start : chunk;
        CHECK_STATUS(sotto_decoder_feed_int16(decoder, pcm + start, n), SOTTO_OK);
    }
    CHECK_STATUS(sotto_decoder_flush(decoder), SOTTO_OK);
    CHECK(callback_frames == 1);
    CHECK(callback_reentry == SOTTO_ERROR_STATE);
    CHECK(callback_last.token_length == 3 && memcmp(callback_last.token, token, 3) == 0);
    CHECK(strcmp(callback_last.profile, "robust") == 0);
    CHECK(sotto_decoder_pending_frames(decoder) == 0);  // delivered, not queued
    uint64_t fed = 0;
    CHECK_STATUS(sotto_decoder_samples_fed(decoder, &fed), SOTTO_OK);
    CHECK(fed == count);

    // After a flush the stream is over: feeding is refused until a reset.
    CHECK_STATUS(sotto_decoder_feed_int16(decoder, pcm, 10), SOTTO_ERROR_STATE);
    CHECK(strstr(sotto_decoder_error_message(decoder), "reset") != NULL);
    CHECK_STATUS(sotto_decoder_flush(decoder), SOTTO_OK);  // a second flush does nothing
    CHECK_STATUS(sotto_decoder_reset(decoder), SOTTO_OK);
    CHECK_STATUS(sotto_decoder_samples_fed(decoder, &fed), SOTTO_OK);
    CHECK(fed == 0);

    // Back to polling: the same stream again, all at once.
    CHECK_STATUS(sotto_decoder_set_callback(decoder, NULL, NULL), SOTTO_OK);
    CHECK_STATUS(sotto_decoder_feed_int16(decoder, pcm, count), SOTTO_OK);
    CHECK_STATUS(sotto_decoder_flush(decoder), SOTTO_OK);
    CHECK(sotto_decoder_pending_frames(decoder) == 1);
    sotto_frame frame = {.struct_size = 8};
    CHECK_STATUS(sotto_decoder_next_frame(decoder, &frame), SOTTO_ERROR_STRUCT_SIZE);
    CHECK(sotto_decoder_pending_frames(decoder) == 1);  // still queued
    CHECK_STATUS(sotto_decoder_next_frame(decoder, NULL), SOTTO_ERROR_NULL);
    frame.struct_size = sizeof frame;
    CHECK_STATUS(sotto_decoder_next_frame(decoder, &frame), SOTTO_OK);
    CHECK(fabs(frame.start_time_s - callback_last.start_time_s) < 1e-9);  // same frame, same time
    CHECK_STATUS(sotto_decoder_next_frame(decoder, &frame), SOTTO_NO_FRAME);
    sotto_decoder_destroy(decoder);
    free(pcm);
    free(audio);
}

static void test_decoder_errors(void) {
    sotto_decoder *decoder = (sotto_decoder *)&passed;
    CHECK_STATUS(sotto_decoder_create(44100, "default,bogus", &decoder), SOTTO_ERROR_ARGUMENT);
    CHECK(decoder == NULL);
    CHECK(strstr(sotto_thread_error_message(), "bogus") != NULL);
    CHECK_STATUS(sotto_decoder_create(44100, "", &decoder), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_decoder_create(NAN, NULL, &decoder), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_decoder_create(0, NULL, &decoder), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_decoder_create(1e9, NULL, &decoder), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_decoder_create(8000, "all", &decoder), SOTTO_ERROR_ARGUMENT);  // too low for 18-20 kHz
    CHECK_STATUS(sotto_decoder_create(16000, "audible", &decoder), SOTTO_OK);
    sotto_decoder_destroy(decoder);
    CHECK_STATUS(sotto_decoder_create(48000, NULL, NULL), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_decoder_create(8000, NULL, &decoder), SOTTO_ERROR_ARGUMENT);  // no profile fits 8 kHz
    CHECK_STATUS(sotto_decoder_create(16000, NULL, &decoder), SOTTO_OK);              // NULL: the audible one fits
    sotto_decoder_destroy(decoder);
    // NULL searches every profile the rate carries, as the command line listens (before 1.1: default only).
    size_t count = 0;
    float *fast = burst("fast", 48000, token8, 8, 0.1, &count);
    CHECK(fast != NULL);
    sotto_frame found[2];
    CHECK(decode_chunks(48000, NULL, fast, count, 4096, found, 2) == 1);
    CHECK(decode_chunks(48000, "default", fast, count, 4096, found, 2) == 0);
    free(fast);

    CHECK_STATUS(sotto_decoder_create(48000, "all", &decoder), SOTTO_OK);
    float samples[4] = {0};
    CHECK_STATUS(sotto_decoder_feed_float(decoder, NULL, 4), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_decoder_feed_float(decoder, NULL, 0), SOTTO_OK);
    CHECK_STATUS(sotto_decoder_feed_float(decoder, samples, (size_t)-1), SOTTO_ERROR_ARGUMENT);
    CHECK(strstr(sotto_decoder_error_message(decoder), "PTRDIFF_MAX") != NULL);
    CHECK_STATUS(sotto_decoder_feed_int16(decoder, NULL, 4), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_decoder_feed_int16(decoder, (const int16_t *)samples, (size_t)-2), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_decoder_samples_fed(decoder, NULL), SOTTO_ERROR_NULL);
    sotto_decoder_destroy(decoder);

    sotto_frame frame = {.struct_size = sizeof frame};
    uint64_t fed;
    CHECK_STATUS(sotto_decoder_feed_float(NULL, samples, 4), SOTTO_ERROR_NULL);
    CHECK(strstr(sotto_thread_error_message(), "decoder handle") != NULL);
    CHECK_STATUS(sotto_decoder_feed_int16(NULL, (const int16_t *)samples, 4), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_decoder_flush(NULL), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_decoder_reset(NULL), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_decoder_next_frame(NULL, &frame), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_decoder_set_callback(NULL, on_frame, NULL), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_decoder_samples_fed(NULL, &fed), SOTTO_ERROR_NULL);
    CHECK(sotto_decoder_pending_frames(NULL) == 0);
    CHECK(sotto_decoder_error_message(NULL) != NULL);
    sotto_decoder_destroy(NULL);
}

static void test_simulator(void) {
    size_t count = 0;
    float *audio = burst("default", 48000, token8, 8, 0.3, &count);
    sotto_channel channel;
    sotto_channel_init(&channel);
    CHECK(channel.struct_size == sizeof channel && isnan(channel.snr_db) && channel.seed == 1);
    channel.rt60_s = 0.3;
    channel.distance_m = 1;
    channel.clock_offset_ppm = 200;
    channel.output_sample_rate_hz = 44100;
    channel.snr_db = 10;
    channel.quantize_16_bit = 1;
    float *heard = NULL;
    size_t heard_count = 0;
    double heard_rate = 0;
    CHECK_STATUS(sotto_simulate(&channel, audio, count, 48000, &heard, &heard_count, &heard_rate), SOTTO_OK);
    CHECK(heard != NULL && heard_rate == 44100);
    CHECK(heard_count > count * 44100 / 48000);  // the room's tail and the clock offset lengthen it
    sotto_frame frames[4];
    int found = decode_chunks(heard_rate, NULL, heard, heard_count, 1000, frames, 4);
    CHECK(found == 1);
    if (found >= 1) {
        CHECK(memcmp(frames[0].token, token8, 8) == 0);
        CHECK(frames[0].snr_db < clean_snr_db - 3);  // noise and reverberation lower the estimate
        CHECK(fabs(frames[0].clock_offset_ppm - 200) < 100);
    }
    // The same seed gives the same output.
    float *again = NULL;
    size_t again_count = 0;
    sotto_simulate(&channel, audio, count, 48000, &again, &again_count, &heard_rate);
    CHECK(again_count == heard_count && memcmp(again, heard, heard_count * sizeof(float)) == 0);
    sotto_samples_free(again);
    sotto_samples_free(heard);

    heard = (float *)audio;
    channel.rt60_s = -1;
    CHECK_STATUS(sotto_simulate(&channel, audio, count, 48000, &heard, &heard_count, &heard_rate), SOTTO_ERROR_ARGUMENT);
    CHECK(heard == NULL);
    CHECK(strstr(sotto_thread_error_message(), "rt60_s") != NULL);
    sotto_channel_init(&channel);
    channel.snr_db = INFINITY;
    CHECK_STATUS(sotto_simulate(&channel, audio, count, 48000, &heard, &heard_count, &heard_rate), SOTTO_ERROR_ARGUMENT);
    sotto_channel_init(&channel);
    CHECK_STATUS(sotto_simulate(&channel, audio, count, 0, &heard, &heard_count, &heard_rate), SOTTO_ERROR_ARGUMENT);
    CHECK_STATUS(sotto_simulate(&channel, NULL, count, 48000, &heard, &heard_count, &heard_rate), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_simulate(NULL, audio, count, 48000, &heard, &heard_count, &heard_rate), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_simulate(&channel, audio, count, 48000, NULL, &heard_count, &heard_rate), SOTTO_ERROR_NULL);
    CHECK_STATUS(sotto_simulate(&channel, audio, (size_t)-1, 48000, &heard, &heard_count, &heard_rate), SOTTO_ERROR_ARGUMENT);
    channel.struct_size = 16;
    CHECK_STATUS(sotto_simulate(&channel, audio, count, 48000, &heard, &heard_count, &heard_rate), SOTTO_ERROR_STRUCT_SIZE);
    sotto_channel_init(NULL);
    sotto_samples_free(NULL);
    free(audio);
}

// Distinct handles on distinct threads at once; each thread's error message is its own.
struct thread_work {
    double rate;
    uint8_t token[4];
    int decoded;
    int message_was_empty;
};

static void *thread_round_trip(void *argument) {
    struct thread_work *work = argument;
    work->message_was_empty = sotto_thread_error_message()[0] == 0;
    size_t count = 0;
    float *audio = burst("fast", work->rate, work->token, 4, 0.1, &count);
    sotto_frame frames[2];
    int found = audio ? decode_chunks(work->rate, "fast", audio, count, 512, frames, 2) : -1;
    work->decoded = found == 1 && memcmp(frames[0].token, work->token, 4) == 0;
    free(audio);
    return NULL;
}

static void test_threads(void) {
    sotto_profile_get(99, NULL);  // leaves a message on this thread only
    CHECK(sotto_thread_error_message()[0] != 0);
    struct thread_work work[2] = {{48000, {1, 2, 3, 4}, 0, 0}, {96000, {5, 6, 7, 8}, 0, 0}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, thread_round_trip, &work[i]);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECK(work[i].decoded);
        CHECK(work[i].message_was_empty);
    }
}

// Run with the fault shim (Tests/AllocFaultShim) failing FFTW's buffers: a decoder whose transforms cannot be
// made is SOTTO_ERROR_RESOURCE with FFTW's reason, not SOTTO_ERROR_ARGUMENT (the rate and profiles are right).
static void test_transform_failure(void) {
    sotto_decoder *decoder = (sotto_decoder *)1;
    CHECK_STATUS(sotto_decoder_create(48000, "default", &decoder), SOTTO_ERROR_RESOURCE);
    CHECK(decoder == NULL);
    CHECK(strstr(sotto_thread_error_message(), "cannot prepare the receiver") != NULL);
    CHECK(strstr(sotto_thread_error_message(), "FFT") != NULL);
    // A room's transforms (its response's diffuse tail, the convolution: far larger than the decoder's) fail alike.
    setenv("SOTTO_FAULT_MEMALIGN", "40000+", 1);
    float silence[4800] = {0};
    sotto_channel channel;
    sotto_channel_init(&channel);
    channel.rt60_s = 0.3;
    channel.distance_m = 1;
    float *heard = (float *)1;
    size_t heard_count = 0;
    double heard_rate = 0;
    CHECK_STATUS(sotto_simulate(&channel, silence, 4800, 48000, &heard, &heard_count, &heard_rate), SOTTO_ERROR_RESOURCE);
    CHECK(heard == NULL && heard_count == 0);
    CHECK(strstr(sotto_thread_error_message(), "FFT") != NULL);
}

// With the argument "errors", only the error paths (quick enough to run under valgrind in every test run).
int main(int argc, char **argv) {
    int errors_only = argc > 1 && strcmp(argv[1], "errors") == 0;
    if (argc > 1 && strcmp(argv[1], "transform-failure") == 0) {
        test_transform_failure();
        printf("capi (transform failure): %d passed, %d failed\n", passed, failed);
        return failed == 0 ? 0 : 1;
    }
    test_version_and_status_names();
    test_profiles();
    if (!errors_only) test_modulator_round_trip_and_level();
    test_modulator_errors();
    if (!errors_only) test_decoder_int16_callback_flush_reset();
    test_decoder_errors();
    if (!errors_only) test_simulator();
    if (!errors_only) test_threads();
    printf("capi: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
