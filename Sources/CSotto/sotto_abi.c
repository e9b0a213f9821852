// What the C side of libsotto holds: the version, the per-thread error message of calls without a handle,
// and compile-time guards of the ABI's struct layouts.
#include "sotto_internal.h"
#include <stddef.h>
#include <string.h>

const char *sotto_version(void) { return SOTTO_VERSION; }

static _Thread_local char thread_error[512];

const char *sotto_thread_error_message(void) { return thread_error; }

void sotto_internal_set_thread_error(const char *message) {
    if (message == NULL) { thread_error[0] = 0; return; }
    strncpy(thread_error, message, sizeof thread_error - 1);
    thread_error[sizeof thread_error - 1] = 0;
}

// The first version of each struct: these sizes and offsets are ABI 1 and never change within it (LP64).
#if defined(__LP64__)
_Static_assert(sizeof(sotto_frame) == 96, "sotto_frame changed: ABI 1 is broken");
_Static_assert(offsetof(sotto_frame, start_time_s) == 48, "sotto_frame changed: ABI 1 is broken");
_Static_assert(sizeof(sotto_profile_info) == 96, "sotto_profile_info changed: ABI 1 is broken");
_Static_assert(sizeof(sotto_channel) == 88, "sotto_channel changed: ABI 1 is broken");
#endif
