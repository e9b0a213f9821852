#ifndef CSOTTOSHIMS_H
#define CSOTTOSHIMS_H
#include <alsa/asoundlib.h>

/// Silences ALSA's library error printer (its handler type is variadic, which Swift cannot write).
void sotto_alsa_silence_errors(void);
/// Restores ALSA's default error printer.
void sotto_alsa_restore_errors(void);

/// Copies up to `length` bytes at the head of pipe `input` into pipe `output` without consuming them
/// (Linux tee(2), which Swift's Glibc module hides behind _GNU_SOURCE); -1 with errno on failure.
long sotto_tee(int input, int output, unsigned long length);

/// The device and inode of open descriptor `fd` (what systemd's JOURNAL_STREAM names); 0, or -1 with errno.
/// (In C: with Foundation imported, a release build refuses `struct stat`'s members to Swift.)
int sotto_fd_identity(int fd, unsigned long long *device, unsigned long long *inode);

#endif
