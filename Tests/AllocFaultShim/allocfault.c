// A fault injector for tests, loaded with LD_PRELOAD: memalign(3), through which FFTW allocates its buffers
// (fftwf_malloc), fails with ENOMEM for the sizes listed in SOTTO_FAULT_MEMALIGN (bytes, comma-separated; a
// size ending in '+' fails that size and every larger one). Unset or empty: memalign as usual. The real
// allocator is untouched otherwise (malloc, posix_memalign: Swift's own allocations), so what fails is the
// transform's allocation alone, as when memory runs out at that moment.
//
//   SOTTO_FAULT_MEMALIGN=16384 LD_PRELOAD=.build/debug/libsotto_allocfault.so sotto decode x.wav
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>

static int fails(size_t size) {
    const char *list = getenv("SOTTO_FAULT_MEMALIGN");
    if (list == NULL) return 0;
    while (*list) {
        char *end = NULL;
        unsigned long long listed = strtoull(list, &end, 10);
        if (end == list) return 0;
        if (*end == '+') {
            if (size >= listed) return 1;
            end++;
        } else if (size == listed) {
            return 1;
        }
        list = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
    }
    return 0;
}

void *memalign(size_t alignment, size_t size) {
    static void *(*real)(size_t, size_t);
    if (fails(size)) {
        errno = ENOMEM;
        return NULL;
    }
    if (real == NULL) real = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
    return real(alignment, size);
}
