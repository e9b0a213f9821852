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

/// Installs the process's SIGINT and SIGTERM handler, first thing in `main`: until a command calls
/// sotto_catch_stop_signals, a signal does what it did before (the default action, ending the process; or
/// nothing, when the program started with it ignored: then it is remembered for a command that stops on
/// signals). A handler, not SIG_IGN: children the program executes get the default actions. 0, or -1 with errno.
int sotto_prepare_stop_signals(void);

/// A command stops on SIGINT and SIGTERM from now on: the first one's number is written (one byte) to
/// `notify_fd` (a pipe's write end, read by a thread of the program; at once for one remembered); any later
/// one writes a line to standard error and ends the process at once with status 128 + the signal. Needs
/// sotto_prepare_stop_signals first. 0, or -1 with errno.
int sotto_catch_stop_signals(int notify_fd);

#endif
