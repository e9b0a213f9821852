#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "CSottoShims.h"

static void sotto_quiet_handler(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}

void sotto_alsa_silence_errors(void) { snd_lib_error_set_handler(sotto_quiet_handler); }
void sotto_alsa_restore_errors(void) { snd_lib_error_set_handler(NULL); }

long sotto_tee(int input, int output, unsigned long length) { return (long)tee(input, output, length, 0); }

int sotto_fd_identity(int fd, unsigned long long *device, unsigned long long *inode) {
    struct stat status;
    if (fstat(fd, &status) != 0) return -1;
    *device = (unsigned long long)status.st_dev;
    *inode = (unsigned long long)status.st_ino;
    return 0;
}

// SIGINT and SIGTERM for a long-running command. A real handler (not SIG_IGN with a dispatch source): on
// Linux libdispatch reads signals through a signalfd and blocks them only in the thread that made the
// source, so a signal the kernel handed to another thread was discarded under SIG_IGN and the command never
// stopped. Any thread may run this handler; it only does async-signal-safe things.
static int sotto_stop_fd = -1;
static int sotto_stop_armed = 0;     // a command stops on the signals (sotto_catch_stop_signals)
static int sotto_stop_count = 0;     // signals handled while armed
static int sotto_stop_pending = 0;   // a signal that came before, while the program ignored it
static int sotto_ignored_at_start[2];  // SIGINT, SIGTERM were SIG_IGN when the program started

static void sotto_stop_handler(int signo) {
    int saved = errno;
    if (!__atomic_load_n(&sotto_stop_armed, __ATOMIC_SEQ_CST)) {
        if (sotto_ignored_at_start[signo == SIGTERM]) {
            // Ignored, as the program was asked to (nohup, a script's background job), but remembered: a command
            // that stops on signals and starts a moment later stops then.
            __atomic_store_n(&sotto_stop_pending, signo, __ATOMIC_SEQ_CST);
        } else {
            // The default action, as if nothing were caught (blocked while this handler runs: it ends the process
            // on return).
            signal(signo, SIG_DFL);
            raise(signo);
        }
        errno = saved;
        return;
    }
    if (__atomic_fetch_add(&sotto_stop_count, 1, __ATOMIC_SEQ_CST) > 0) {
        static const char again_int[] = "sotto: interrupted again: stopping now\n";
        static const char again_term[] = "sotto: terminated again: stopping now\n";
        if (signo == SIGINT) (void)!write(2, again_int, sizeof again_int - 1);
        else (void)!write(2, again_term, sizeof again_term - 1);
        _exit(128 + signo);
    }
    unsigned char byte = (unsigned char)signo;
    (void)!write(sotto_stop_fd, &byte, 1);
    errno = saved;
}

int sotto_prepare_stop_signals(void) {
    struct sigaction action, previous;
    memset(&action, 0, sizeof action);
    action.sa_handler = sotto_stop_handler;
    sigemptyset(&action.sa_mask);
    sigaddset(&action.sa_mask, SIGINT);
    sigaddset(&action.sa_mask, SIGTERM);
    action.sa_flags = SA_RESTART;
    int signals[2] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        if (sigaction(signals[i], NULL, &previous) != 0) return -1;
        sotto_ignored_at_start[i] = previous.sa_handler == SIG_IGN;
        if (sigaction(signals[i], &action, NULL) != 0) return -1;
    }
    return 0;
}

int sotto_catch_stop_signals(int notify_fd) {
    sotto_stop_fd = notify_fd;
    __atomic_store_n(&sotto_stop_armed, 1, __ATOMIC_SEQ_CST);
    // A signal blocked in the mask this process inherited would never arrive: unblock both in this thread (and
    // so in the threads it starts from now on).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    if (pthread_sigmask(SIG_UNBLOCK, &set, NULL) != 0) return -1;
    int pending = __atomic_exchange_n(&sotto_stop_pending, 0, __ATOMIC_SEQ_CST);
    if (pending) {
        // As if it came now (a signal that also comes now is then the second).
        if (__atomic_fetch_add(&sotto_stop_count, 1, __ATOMIC_SEQ_CST) == 0) {
            unsigned char byte = (unsigned char)pending;
            (void)!write(sotto_stop_fd, &byte, 1);
        }
    }
    return 0;
}
