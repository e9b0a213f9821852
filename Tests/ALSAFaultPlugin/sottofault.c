// An ALSA external I/O plugin (ioplug) for testing device failures without a sound card.
//
// It is a real ALSA PCM: libasound loads it from an asoundrc (`pcm_type.sottofault { lib "..." }`) and
// the program under test talks to it through the ordinary snd_pcm_* calls, so open, read, write,
// snd_pcm_recover and close run exactly as they do on hardware. It behaves like a mono S16_LE device
// at one rate and can be unplugged and suspended from outside, through marker files:
//
//   pcm.name {
//       type sottofault
//       rate 48000                 # the only rate it offers (Hz)
//       infile "/path/in.raw"      # capture: raw S16_LE mono, read from the start at each open; silence after it
//       outfile "/path/out.raw"    # playback: appended, raw S16_LE mono
//       gone "/path/gone"          # while this file exists the device is unplugged: open fails with ENODEV,
//                                  # a running stream goes DISCONNECTED (I/O returns -ENODEV)
//       suspended "/path/susp"     # while this file exists a running stream is SUSPENDED (-ESTRPIPE);
//                                  # snd_pcm_resume waits until it is removed, as hardware wakes up
//       resuming "/path/resuming"  # created while snd_pcm_resume waits for `suspended` to go (a test knows that
//                                  # the program's I/O thread is held there), removed when it returns
//       refuse "/path/refuse"      # while this file exists, opening fails with the errno written in it
//                                  # (e.g. 16 for EBUSY: another program has the device; 13 for EACCES)
//       format "S16_LE"            # the only sample format offered (default S16_LE; I/O works in S16_LE only,
//                                  # other formats are for testing how a program refuses them)
//       realtime 1                 # pace I/O to the sample clock (default 1); 0 runs as fast as it is read
//       clock "/path/t0"           # capture: infile is a live sound that began at this file's modification time
//                                  # (silence while the file does not exist); each open starts reading it at
//                                  # the wall-clock position, as a microphone hears a room that went on while
//                                  # it was closed (duty-cycled listening)
//       opens "/path/opens"        # each successful open appends a line: the wall-clock time (s since 1970)
//   }
//
// Test-only: it is built as a dynamic library so that libasound can dlopen it, and used by the live
// audio tests. No Sotto code links it.

#include <alsa/asoundlib.h>
#include <alsa/pcm_external.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    snd_pcm_ioplug_t io;
    char *infile, *outfile, *gone, *suspended, *resuming, *refuse, *clock;
    snd_pcm_format_t format;
    FILE *in, *out;
    unsigned int rate;
    int realtime;
    int wake[2];                 // a pipe that is always readable: ALSA's poll never waits on us
    snd_pcm_uframes_t position;  // frames transferred since the first transfer (the device's sample clock)
    struct timespec started;     // when the first frame was transferred
    int clock_running;
    int clock_synced;            // with `clock`: the infile is positioned at the live sound's wall-clock time
} fault_pcm;

// With `clock`: once its file exists, seeks the infile to the sound's current position (once per open).
static void sync_live(fault_pcm *pcm) {
    struct stat st;
    if (pcm->clock_synced || stat(pcm->clock, &st) != 0) return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double elapsed = (double)(now.tv_sec - st.st_mtim.tv_sec) + (double)(now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
    if (elapsed < 0) elapsed = 0;
    if (pcm->in) fseeko(pcm->in, (off_t)(elapsed * pcm->rate) * (off_t)sizeof(int16_t), SEEK_SET);
    pcm->clock_synced = 1;
}

static int exists(const char *path) { return path && access(path, F_OK) == 0; }

// Sleeps until `frames` frames of the sample clock have passed since start (realtime mode).
static void pace(fault_pcm *pcm, snd_pcm_uframes_t frames) {
    if (!pcm->realtime) return;
    double due = (double)frames / pcm->rate;
    struct timespec target = pcm->started;
    target.tv_sec += (time_t)due;
    target.tv_nsec += (long)((due - (double)(time_t)due) * 1e9);
    if (target.tv_nsec >= 1000000000L) { target.tv_sec += 1; target.tv_nsec -= 1000000000L; }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &target, NULL) == EINTR) {}
}

// Checks the marker files; returns 0 or the error the I/O must fail with (and sets the PCM state).
static int fault(fault_pcm *pcm) {
    if (exists(pcm->gone)) {
        snd_pcm_ioplug_set_state(&pcm->io, SND_PCM_STATE_DISCONNECTED);
        return -ENODEV;
    }
    if (exists(pcm->suspended)) {
        snd_pcm_ioplug_set_state(&pcm->io, SND_PCM_STATE_SUSPENDED);
        return -ESTRPIPE;
    }
    return 0;
}

static int fault_start(snd_pcm_ioplug_t *io) { (void)io; return 0; }

static int fault_stop(snd_pcm_ioplug_t *io) { (void)io; return 0; }

// Always one period ready for capture; playback consumes everything at once (transfer paces it).
static snd_pcm_sframes_t fault_pointer(snd_pcm_ioplug_t *io) {
    if (io->stream == SND_PCM_STREAM_CAPTURE)
        return (snd_pcm_sframes_t)((io->appl_ptr + io->period_size) % io->buffer_size);
    return (snd_pcm_sframes_t)(io->appl_ptr % io->buffer_size);
}

static snd_pcm_sframes_t fault_transfer(snd_pcm_ioplug_t *io, const snd_pcm_channel_area_t *areas,
                                        snd_pcm_uframes_t offset, snd_pcm_uframes_t size) {
    fault_pcm *pcm = io->private_data;
    int error = fault(pcm);
    if (error) return error;
    if (!pcm->clock_running) { clock_gettime(CLOCK_MONOTONIC, &pcm->started); pcm->clock_running = 1; }
    int16_t *samples = (int16_t *)((char *)areas[0].addr + (areas[0].first + offset * areas[0].step) / 8);
    if (io->stream == SND_PCM_STREAM_CAPTURE) {
        pace(pcm, pcm->position + size);
        if (pcm->clock) sync_live(pcm);
        size_t got = pcm->in && (!pcm->clock || pcm->clock_synced) ? fread(samples, sizeof(int16_t), size, pcm->in) : 0;
        memset(samples + got, 0, (size - got) * sizeof(int16_t));
    } else {
        pace(pcm, pcm->position);
        if (pcm->out && fwrite(samples, sizeof(int16_t), size, pcm->out) != size) return -EIO;
        if (pcm->out) fflush(pcm->out);
    }
    pcm->position += size;
    return (snd_pcm_sframes_t)size;
}

// Called by snd_pcm_resume (from snd_pcm_recover): wait for the "hardware" to wake up, as a driver does.
static int fault_resume(snd_pcm_ioplug_t *io) {
    fault_pcm *pcm = io->private_data;
    if (pcm->resuming && exists(pcm->suspended)) {
        FILE *marker = fopen(pcm->resuming, "w");
        if (marker) fclose(marker);
    }
    while (exists(pcm->suspended) && !exists(pcm->gone)) usleep(5000);
    if (pcm->resuming) unlink(pcm->resuming);
    if (exists(pcm->gone)) {
        snd_pcm_ioplug_set_state(io, SND_PCM_STATE_DISCONNECTED);
        return -ENODEV;
    }
    snd_pcm_ioplug_set_state(io, SND_PCM_STATE_RUNNING);
    return 0;
}

static int fault_close(snd_pcm_ioplug_t *io) {
    fault_pcm *pcm = io->private_data;
    if (pcm->in) fclose(pcm->in);
    if (pcm->out) fclose(pcm->out);
    close(pcm->wake[0]);
    close(pcm->wake[1]);
    free(pcm->infile); free(pcm->outfile); free(pcm->gone); free(pcm->suspended); free(pcm->resuming); free(pcm->refuse); free(pcm->clock);
    free(pcm);
    return 0;
}

static const snd_pcm_ioplug_callback_t fault_callbacks = {
    .start = fault_start,
    .stop = fault_stop,
    .pointer = fault_pointer,
    .transfer = fault_transfer,
    .resume = fault_resume,
    .close = fault_close,
};

static int string_value(snd_config_t *node, char **out) {
    const char *value;
    int error = snd_config_get_string(node, &value);
    if (error < 0) return error;
    *out = strdup(value);
    return 0;
}

SND_PCM_PLUGIN_DEFINE_FUNC(sottofault) {
    (void)root;
    snd_config_iterator_t i, next;
    fault_pcm *pcm = calloc(1, sizeof(*pcm));
    if (!pcm) return -ENOMEM;
    pcm->rate = 48000;
    pcm->realtime = 1;
    pcm->format = SND_PCM_FORMAT_S16_LE;
    pcm->wake[0] = pcm->wake[1] = -1;
    int error = 0;
    char *opens = NULL;
    snd_config_for_each(i, next, conf) {
        snd_config_t *node = snd_config_iterator_entry(i);
        const char *id;
        if (snd_config_get_id(node, &id) < 0) continue;
        if (!strcmp(id, "comment") || !strcmp(id, "type") || !strcmp(id, "hint")) continue;
        long number;
        if (!strcmp(id, "infile")) error = string_value(node, &pcm->infile);
        else if (!strcmp(id, "outfile")) error = string_value(node, &pcm->outfile);
        else if (!strcmp(id, "gone")) error = string_value(node, &pcm->gone);
        else if (!strcmp(id, "suspended")) error = string_value(node, &pcm->suspended);
        else if (!strcmp(id, "resuming")) error = string_value(node, &pcm->resuming);
        else if (!strcmp(id, "refuse")) error = string_value(node, &pcm->refuse);
        else if (!strcmp(id, "clock")) error = string_value(node, &pcm->clock);
        else if (!strcmp(id, "opens")) { free(opens); opens = NULL; error = string_value(node, &opens); }
        else if (!strcmp(id, "format")) {
            const char *value;
            if ((error = snd_config_get_string(node, &value)) >= 0 &&
                (pcm->format = snd_pcm_format_value(value)) == SND_PCM_FORMAT_UNKNOWN) error = -EINVAL;
        }
        else if (!strcmp(id, "rate")) { error = snd_config_get_integer(node, &number); pcm->rate = (unsigned int)number; }
        else if (!strcmp(id, "realtime")) { error = snd_config_get_integer(node, &number); pcm->realtime = number != 0; }
        else { SNDERR("sottofault: unknown field %s", id); error = -EINVAL; }
        if (error < 0) goto fail;
    }
    // An unplugged device cannot be opened; a refused one fails with the errno its marker holds.
    if (exists(pcm->gone)) { error = -ENODEV; goto fail; }
    if (exists(pcm->refuse)) {
        FILE *marker = fopen(pcm->refuse, "r");
        int code = 0;
        if (marker) { if (fscanf(marker, "%d", &code) != 1) code = 0; fclose(marker); }
        error = code > 0 ? -code : -EIO;
        goto fail;
    }
    if (stream == SND_PCM_STREAM_CAPTURE && pcm->infile && !(pcm->in = fopen(pcm->infile, "rb"))) { error = -errno; goto fail; }
    if (stream == SND_PCM_STREAM_PLAYBACK && pcm->outfile && !(pcm->out = fopen(pcm->outfile, "ab"))) { error = -errno; goto fail; }
    if (pipe(pcm->wake) < 0 || write(pcm->wake[1], "x", 1) != 1) { error = -errno; goto fail; }

    pcm->io.version = SND_PCM_IOPLUG_VERSION;
    pcm->io.name = "Sotto fault-injection test PCM";
    pcm->io.callback = &fault_callbacks;
    pcm->io.private_data = pcm;
    pcm->io.poll_fd = pcm->wake[0];
    pcm->io.poll_events = POLLIN;
    if ((error = snd_pcm_ioplug_create(&pcm->io, name, stream, mode)) < 0) goto fail;

    static const unsigned int access_list[] = { SND_PCM_ACCESS_RW_INTERLEAVED };
    const unsigned int format_list[] = { (unsigned int)pcm->format };
    if ((error = snd_pcm_ioplug_set_param_list(&pcm->io, SND_PCM_IOPLUG_HW_ACCESS, 1, access_list)) < 0 ||
        (error = snd_pcm_ioplug_set_param_list(&pcm->io, SND_PCM_IOPLUG_HW_FORMAT, 1, format_list)) < 0 ||
        (error = snd_pcm_ioplug_set_param_minmax(&pcm->io, SND_PCM_IOPLUG_HW_CHANNELS, 1, 1)) < 0 ||
        (error = snd_pcm_ioplug_set_param_minmax(&pcm->io, SND_PCM_IOPLUG_HW_RATE, pcm->rate, pcm->rate)) < 0 ||
        (error = snd_pcm_ioplug_set_param_minmax(&pcm->io, SND_PCM_IOPLUG_HW_PERIOD_BYTES, 64, 256 * 1024)) < 0 ||
        (error = snd_pcm_ioplug_set_param_minmax(&pcm->io, SND_PCM_IOPLUG_HW_PERIODS, 2, 64)) < 0) {
        snd_pcm_ioplug_delete(&pcm->io);  // calls fault_close
        free(opens);
        return error;
    }
    *pcmp = pcm->io.pcm;
    if (opens) {
        FILE *log = fopen(opens, "a");
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        if (log) { fprintf(log, "%.3f\n", (double)now.tv_sec + (double)now.tv_nsec / 1e9); fclose(log); }
        free(opens);
    }
    return 0;

fail:
    free(opens);
    if (pcm->in) fclose(pcm->in);
    if (pcm->out) fclose(pcm->out);
    if (pcm->wake[0] >= 0) close(pcm->wake[0]);
    if (pcm->wake[1] >= 0) close(pcm->wake[1]);
    free(pcm->infile); free(pcm->outfile); free(pcm->gone); free(pcm->suspended); free(pcm->resuming); free(pcm->refuse); free(pcm->clock);
    free(pcm);
    return error;
}

SND_PCM_PLUGIN_SYMBOL(sottofault);
