/* Internal to libsotto (not installed): what the Swift implementation needs from C. */
#ifndef SOTTO_INTERNAL_H
#define SOTTO_INTERNAL_H

#include "sotto.h"

/** Copies `message` (truncated to 511 bytes) into the calling thread's error message. */
__attribute__((visibility("hidden"))) void sotto_internal_set_thread_error(const char *message);

#endif
