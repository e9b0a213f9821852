#include <stddef.h>
#include <stdint.h>

/// libFuzzer's driver (in the runtime linked by -sanitize=fuzzer): runs the fuzzing loop on `callback`
/// with libFuzzer's command-line options. SwiftPM gives each executable target a main of its own, so the
/// targets call this from it instead of using libFuzzer's main.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
