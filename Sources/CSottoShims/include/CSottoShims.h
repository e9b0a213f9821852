#ifndef CSOTTOSHIMS_H
#define CSOTTOSHIMS_H
#include <alsa/asoundlib.h>

/// Silences ALSA's library error printer (its handler type is variadic, which Swift cannot write).
void sotto_alsa_silence_errors(void);
/// Restores ALSA's default error printer.
void sotto_alsa_restore_errors(void);

#endif
