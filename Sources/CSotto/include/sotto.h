/*
 * sotto.h - the Sotto modem as a C library (libsotto.so.1).
 *
 * Sotto moves short tokens (1-16 bytes) between machines as near-ultrasonic sound: 16-ary GFSK at
 * 18-20 kHz (or 2-4 kHz with the "audible" profile) behind an up/down chirp preamble, with a K = 7
 * convolutional code and a CRC-16. This header is the whole C API; `pkg-config --cflags --libs sotto`
 * gives the flags.
 *
 * Shape (as liquid-dsp and SQLite do it): opaque handles that are created, used and destroyed; no Swift
 * type crosses the boundary; plain C structs carry results, each beginning with `struct_size`, which the
 * caller sets to `sizeof` the struct it was compiled with, so that later versions can append fields
 * without breaking programs built against this one.
 *
 * Errors: every function that can fail returns a `sotto_status`: SOTTO_OK (0), a positive value that is
 * not an error (SOTTO_NO_FRAME), or a negative error code. A NULL handle, a NULL pointer, a buffer that
 * is too short or a struct of the wrong size is an error code, never a crash or an abort. The message of
 * the last failure on a handle is `sotto_modulator_error_message` / `sotto_decoder_error_message`; calls
 * without a handle (creation, profiles, the simulator) keep theirs per thread, in
 * `sotto_thread_error_message`.
 *
 * Thread safety, stated again on each function:
 *   - functions without a handle argument may be called from any thread at any time;
 *   - a handle belongs to one thread at a time: calls on the same handle must not overlap (lock around
 *     them if several threads share it);
 *   - distinct handles may be used in parallel on different threads.
 *
 * Units: sample rates in Hz (samples per second), times in seconds (s), levels in dB relative to full
 * scale (dBFS, full scale = 1.0 for float samples, 32768 for int16), SNR in dB, clock offsets in parts per
 * million (ppm), lengths of sample buffers in samples (not bytes), token lengths in bytes.
 *
 * ABI: the soname is libsotto.so.SOTTO_ABI_VERSION. Within one major version functions are only added,
 * never removed or changed, and structs only grow at their end.
 */
#ifndef SOTTO_H
#define SOTTO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Major version of the ABI: the number in the soname (libsotto.so.1). */
#define SOTTO_ABI_VERSION 1
/** Version of the library this header comes with, "MAJOR.MINOR.PATCH" (MAJOR = SOTTO_ABI_VERSION). */
#define SOTTO_VERSION "1.0.0"

/** Shortest token (bytes). */
#define SOTTO_TOKEN_MIN_BYTES 1
/** Longest token (bytes). */
#define SOTTO_TOKEN_MAX_BYTES 16
/** Size of the name fields (bytes, NUL included). */
#define SOTTO_NAME_BYTES 16

/** What a call returned: 0 or positive is not an error, negative is. */
typedef int sotto_status;

/** Success. */
#define SOTTO_OK 0
/** Not an error: `sotto_decoder_next_frame` has no frame waiting. */
#define SOTTO_NO_FRAME 1
/** A handle or a required pointer argument was NULL. */
#define SOTTO_ERROR_NULL (-1)
/** An argument out of range: sample rate, level, token length, unknown profile name, NaN. */
#define SOTTO_ERROR_ARGUMENT (-2)
/** The caller's buffer holds fewer samples than the call needs (the count needed is returned). */
#define SOTTO_ERROR_BUFFER_TOO_SMALL (-3)
/** A struct's `struct_size` is smaller than the first version of that struct (or absurd). */
#define SOTTO_ERROR_STRUCT_SIZE (-4)
/** The call is not allowed now: feeding after a flush without a reset, or calling into a decoder from its
 *  own callback. */
#define SOTTO_ERROR_STATE (-5)
/** Memory could not be allocated. */
#define SOTTO_ERROR_MEMORY (-6)
/** A resource the library needs could not be had, through no fault of the arguments: the receiver's
 *  transforms (FFTW could not allocate their buffers or plan them, out of memory). Retrying later, with more
 *  memory free, may succeed. */
#define SOTTO_ERROR_RESOURCE (-7)

/** A short English name of a status ("ok", "null pointer", ...). Never NULL; static storage.
 *  Thread-safe. */
const char *sotto_status_name(sotto_status status);

/** Version of the library, "MAJOR.MINOR.PATCH" (MAJOR = SOTTO_ABI_VERSION). Static storage. Thread-safe. */
const char *sotto_version(void);

/** The ABI major version the loaded library implements (compare with SOTTO_ABI_VERSION). Thread-safe. */
int sotto_abi_version(void);

/** The message of the last failed call without a handle on the calling thread (creation, profiles,
 *  simulator), or "" when none has failed. Valid until the next failing call on this thread.
 *  Thread-safe (each thread has its own). */
const char *sotto_thread_error_message(void);

/* ---------------------------------------------------------------------------------------------------- */
/* Profiles                                                                                               */
/* ---------------------------------------------------------------------------------------------------- */

/** One profile: a named set of waveform parameters. Set `struct_size = sizeof(sotto_profile_info)`. */
typedef struct sotto_profile_info {
    size_t struct_size;          /**< Set by the caller: sizeof(sotto_profile_info). */
    char name[SOTTO_NAME_BYTES]; /**< "default", "fast", "robust" or "audible", NUL-terminated. */
    int identifier;              /**< 0...3, carried in the frame header. */
    int tones_per_sub_band;      /**< Tones per sub-band (16: one symbol carries 4 bits). */
    int sub_bands;               /**< Sub-bands the symbols hop between (1 or 2). */
    double low_frequency_hz;     /**< Bottom of the band the burst occupies (Hz). */
    double high_frequency_hz;    /**< Top of the band (Hz). */
    double center_frequency_hz;  /**< Centre of the band (Hz). */
    double tone_spacing_hz;      /**< Spacing of adjacent tones (Hz); the symbol time is its inverse. */
    double symbol_time_s;        /**< Duration of one 4-bit symbol (s). */
    double chirp_duration_s;     /**< Duration of each of the two preamble chirps (s). */
    double minimum_sample_rate_hz; /**< Lowest sample rate the profile can be sent or decoded at (Hz). */
} sotto_profile_info;

/** Number of profiles (4). Thread-safe. */
int sotto_profile_count(void);

/** Fills `info` with profile number `index` (0 ... sotto_profile_count() - 1, in identifier order).
 *  Errors: SOTTO_ERROR_NULL (info), SOTTO_ERROR_STRUCT_SIZE, SOTTO_ERROR_ARGUMENT (index). Thread-safe. */
sotto_status sotto_profile_get(int index, sotto_profile_info *info);

/** Fills `info` with the profile named `name` (case-insensitive).
 *  Errors: SOTTO_ERROR_NULL, SOTTO_ERROR_STRUCT_SIZE, SOTTO_ERROR_ARGUMENT (unknown name). Thread-safe. */
sotto_status sotto_profile_find(const char *name, sotto_profile_info *info);

/** Airtime of one frame of profile `name` carrying `token_length` bytes, preamble and fades included:
 *  `*seconds` (s). Errors: SOTTO_ERROR_NULL, SOTTO_ERROR_ARGUMENT (name, or length outside 1...16).
 *  Thread-safe. */
sotto_status sotto_profile_airtime(const char *name, size_t token_length, double *seconds);

/* ---------------------------------------------------------------------------------------------------- */
/* Modulator: token -> samples                                                                            */
/* ---------------------------------------------------------------------------------------------------- */

/** Turns tokens into the samples of one burst each, for one profile at one sample rate. */
typedef struct sotto_modulator sotto_modulator;

/** The default output level (dBFS peak): -6. */
#define SOTTO_DEFAULT_LEVEL_DBFS (-6.0)

/** Creates a modulator for profile `profile` (NULL means "default") at `sample_rate_hz` (Hz; at least the
 *  profile's minimum_sample_rate_hz, at most 768000), at level SOTTO_DEFAULT_LEVEL_DBFS.
 *  On success `*modulator` is a new handle to pass to sotto_modulator_destroy; on failure it is NULL and
 *  the message is in sotto_thread_error_message().
 *  Errors: SOTTO_ERROR_NULL (modulator), SOTTO_ERROR_ARGUMENT (profile name, rate). Thread-safe. */
sotto_status sotto_modulator_create(const char *profile, double sample_rate_hz, sotto_modulator **modulator);

/** Destroys a modulator. NULL is ignored. Not concurrently with any other call on the same handle. */
void sotto_modulator_destroy(sotto_modulator *modulator);

/** Sets the output level (the volume): `level_dbfs` (dBFS peak, -120 ... 0). The envelope is constant, so
 *  this is the level of the whole burst. Errors: SOTTO_ERROR_NULL, SOTTO_ERROR_ARGUMENT.
 *  One thread at a time per handle. */
sotto_status sotto_modulator_set_level(sotto_modulator *modulator, double level_dbfs);

/** The output level: `*level_dbfs` (dBFS peak). Errors: SOTTO_ERROR_NULL. One thread at a time per handle. */
sotto_status sotto_modulator_get_level(sotto_modulator *modulator, double *level_dbfs);

/** Samples one frame of `token_length` bytes takes at this modulator's profile and rate: `*sample_count`
 *  (samples). Call it first to size the buffer of sotto_modulator_write.
 *  Errors: SOTTO_ERROR_NULL, SOTTO_ERROR_ARGUMENT (length outside 1...16). One thread at a time per handle. */
sotto_status sotto_modulator_sample_count(sotto_modulator *modulator, size_t token_length, size_t *sample_count);

/** Writes the burst carrying `token` (`token_length` bytes, 1...16) into `samples`, which holds `capacity`
 *  samples (float, full scale = 1.0, mono, at the modulator's rate). `*written` (samples) is set to the
 *  frame's length, also when the buffer is too short (then nothing is written).
 *  Errors: SOTTO_ERROR_NULL (modulator, token, samples, written), SOTTO_ERROR_ARGUMENT (length),
 *  SOTTO_ERROR_BUFFER_TOO_SMALL. One thread at a time per handle. */
sotto_status sotto_modulator_write(sotto_modulator *modulator, const uint8_t *token, size_t token_length,
                                   float *samples, size_t capacity, size_t *written);

/** The message of the last failed call on `modulator` ("" if none). Valid until the next failing call on
 *  it or its destruction. NULL handle: a static message. One thread at a time per handle. */
const char *sotto_modulator_error_message(const sotto_modulator *modulator);

/* ---------------------------------------------------------------------------------------------------- */
/* Streaming decoder: samples -> frames                                                                   */
/* ---------------------------------------------------------------------------------------------------- */

/** Finds and decodes frames in a stream of mono samples fed in chunks of any size. Results do not depend
 *  on the chunking. Memory is bounded (fixed ring buffers per profile). */
typedef struct sotto_decoder sotto_decoder;

/** One decoded frame. Set `struct_size = sizeof(sotto_frame)` before sotto_decoder_next_frame. */
typedef struct sotto_frame {
    size_t struct_size;                    /**< Set by the caller: sizeof(sotto_frame). */
    uint8_t token[SOTTO_TOKEN_MAX_BYTES];  /**< The token; the first token_length bytes are valid. */
    size_t token_length;                   /**< Bytes of token (1...16). */
    char profile[SOTTO_NAME_BYTES];        /**< Name of the profile it was sent with, NUL-terminated. */
    double start_time_s;   /**< First sample of the preamble, in s from the start of the stream. */
    double end_time_s;     /**< End of the frame, in s from the start of the stream. */
    double snr_db;         /**< Estimated in-band SNR (dB): the frame's power (room echoes included) over the noise power in the profile's band. */
    double level_dbfs;     /**< Received level of the burst (dBFS peak). */
    double clock_offset_ppm; /**< Time-scale offset (ppm); positive when the frame arrived stretched. */
    int corrected_bits;    /**< Coded bits the error-correcting code corrected. */
} sotto_frame;

/** Called with each frame as it is decoded, on the thread that called feed or flush, from inside that
 *  call. `frame` is valid during the call only. The callback must not call sotto_decoder_feed_*, _flush,
 *  _reset or _destroy on the same decoder (those return SOTTO_ERROR_STATE; destroy is undefined). */
typedef void (*sotto_frame_callback)(const sotto_frame *frame, void *user_data);

/** Creates a decoder for mono samples at `sample_rate_hz` (Hz, up to 768000) searching for the profiles in
 *  `profiles`: a comma-separated list of names ("default", "fast,robust"), "all", or NULL for every profile the rate can carry (all four from 44.1 kHz, as the command line listens;
 *  before 1.1 NULL meant "default").
 *  The rate must reach each profile's minimum_sample_rate_hz.
 *  On failure `*decoder` is NULL and the message is in sotto_thread_error_message().
 *  Errors: SOTTO_ERROR_NULL (decoder), SOTTO_ERROR_ARGUMENT (rate, names), SOTTO_ERROR_RESOURCE (its
 *  transforms could not be made: out of memory). Thread-safe. */
sotto_status sotto_decoder_create(double sample_rate_hz, const char *profiles, sotto_decoder **decoder);

/** Destroys a decoder and any frames it still holds. NULL is ignored. Not concurrently with any other call
 *  on the same handle, and not from its own callback. */
void sotto_decoder_destroy(sotto_decoder *decoder);

/** Delivers frames to `callback` (with `user_data`) as they are decoded instead of queueing them for
 *  sotto_decoder_next_frame; NULL goes back to queueing. Frames already queued stay queued.
 *  Errors: SOTTO_ERROR_NULL (decoder). One thread at a time per handle. */
sotto_status sotto_decoder_set_callback(sotto_decoder *decoder, sotto_frame_callback callback, void *user_data);

/** Feeds `count` samples (float, full scale = 1.0, mono, at the decoder's rate); any count, 0 included.
 *  The samples are read in place, not copied. Frames completed are queued or passed to the callback.
 *  Errors: SOTTO_ERROR_NULL (decoder, or samples with count > 0), SOTTO_ERROR_ARGUMENT (count beyond
 *  PTRDIFF_MAX), SOTTO_ERROR_STATE (after a flush, before a reset). One thread at a time per handle. */
sotto_status sotto_decoder_feed_float(sotto_decoder *decoder, const float *samples, size_t count);

/** Feeds `count` samples (int16, full scale = 32768, mono): as sotto_decoder_feed_float, converted in
 *  blocks through a buffer the decoder owns (no allocation per call). Errors and thread safety: as
 *  sotto_decoder_feed_float. */
sotto_status sotto_decoder_feed_int16(sotto_decoder *decoder, const int16_t *samples, size_t count);

/** Ends a finite stream: completes every frame under way (a frame ending at the last sample is still
 *  reported). Afterwards the decoder takes no samples until sotto_decoder_reset.
 *  Errors: SOTTO_ERROR_NULL, SOTTO_ERROR_STATE (from its callback). One thread at a time per handle. */
sotto_status sotto_decoder_flush(sotto_decoder *decoder);

/** Takes the oldest queued frame into `frame` (whose struct_size the caller has set): SOTTO_OK, or
 *  SOTTO_NO_FRAME when the queue is empty. Frames come in order of start time within one feed call.
 *  Errors: SOTTO_ERROR_NULL (decoder, frame), SOTTO_ERROR_STRUCT_SIZE (then the frame stays queued).
 *  One thread at a time per handle. */
sotto_status sotto_decoder_next_frame(sotto_decoder *decoder, sotto_frame *frame);

/** Frames queued for sotto_decoder_next_frame (0 for a NULL handle). One thread at a time per handle. */
size_t sotto_decoder_pending_frames(const sotto_decoder *decoder);

/** Samples fed since creation or the last reset: `*count` (samples; divide by the rate for seconds).
 *  Errors: SOTTO_ERROR_NULL. One thread at a time per handle. */
sotto_status sotto_decoder_samples_fed(const sotto_decoder *decoder, uint64_t *count);

/** Starts a new stream at time 0: drops the state of frames under way and every queued frame; keeps the
 *  rate, profiles and callback. Errors: SOTTO_ERROR_NULL, SOTTO_ERROR_STATE (from its callback),
 *  SOTTO_ERROR_RESOURCE (its transforms could not be made again: out of memory; the decoder keeps its old
 *  state). One thread at a time per handle. */
sotto_status sotto_decoder_reset(sotto_decoder *decoder);

/** The message of the last failed call on `decoder` ("" if none). Valid until the next failing call on it
 *  or its destruction. NULL handle: a static message. One thread at a time per handle. */
const char *sotto_decoder_error_message(const sotto_decoder *decoder);

/* ---------------------------------------------------------------------------------------------------- */
/* Channel simulator (for tests): a seeded room and devices                                               */
/* ---------------------------------------------------------------------------------------------------- */

/** A simulated acoustic channel, stages applied in this order, each off unless set: reverberation of a
 *  synthetic room, speaker/microphone roll-off, receiver clock offset, resampling, white noise, clipping,
 *  16-bit quantisation. Initialise with sotto_channel_init, then set what you need. */
typedef struct sotto_channel {
    size_t struct_size;         /**< Set by sotto_channel_init: sizeof(sotto_channel). */
    uint64_t seed;              /**< Seed of every random choice (same seed, same output). Default 1. */
    double rt60_s;              /**< Reverberation time RT60 of a synthetic room (s); 0 = no room. */
    double distance_m;          /**< Source to microphone distance in that room (m). Default 1. */
    double volume_m3;           /**< Room volume (m^3). Default 60. */
    double roll_off_hz;         /**< Roll-off corner (Hz), 24 dB/octave above it; 0 = off. */
    double clock_offset_ppm;    /**< Receiver clock offset (ppm, positive: arrives stretched); 0 = off. */
    double output_sample_rate_hz; /**< Resample the output to this rate (Hz); 0 = keep the input rate. */
    double snr_db;              /**< White noise at this SNR (dB, active signal power over noise power in
                                     0...rate/2); NAN = no noise. */
    double clip_level;          /**< Hard clipping at +-this (full scale = 1.0); 0 = off. */
    int quantize_16_bit;        /**< Non-zero: quantise to 16 bits with TPDF dither. */
} sotto_channel;

/** Sets `channel->struct_size` and every stage off (seed 1, distance 1 m, volume 60 m^3, snr_db NAN).
 *  NULL is ignored. Thread-safe. */
void sotto_channel_init(sotto_channel *channel);

/** Passes `count` samples at `sample_rate_hz` (Hz) through `channel`. The output, allocated by the library,
 *  is `*output` (`*output_count` samples at `*output_sample_rate_hz` Hz; longer than the input with
 *  reverberation or a positive clock offset); free it with sotto_samples_free. On failure `*output` is
 *  NULL and the message is in sotto_thread_error_message().
 *  Errors: SOTTO_ERROR_NULL, SOTTO_ERROR_STRUCT_SIZE, SOTTO_ERROR_ARGUMENT (rate, a stage out of range),
 *  SOTTO_ERROR_MEMORY, SOTTO_ERROR_RESOURCE (the room's transforms could not be made: out of memory).
 *  Thread-safe (reentrant; it keeps no state). */
sotto_status sotto_simulate(const sotto_channel *channel, const float *input, size_t count, double sample_rate_hz,
                            float **output, size_t *output_count, double *output_sample_rate_hz);

/** Frees samples returned by sotto_simulate. NULL is ignored. Thread-safe. */
void sotto_samples_free(float *samples);

#ifdef __cplusplus
}
#endif

#endif /* SOTTO_H */
