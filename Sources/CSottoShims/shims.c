#define _GNU_SOURCE
#include <fcntl.h>
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
