/* hash.h — a 64-bit hash of bytes for lookups whose hits are confirmed on the bytes themselves (the
 * prompt and media caches): FNV-1a's constants over 8-byte words, then the bytes left. Not for
 * anything an adversary must not collide: callers compare what they find. */
#ifndef PM_UTIL_HASH_H
#define PM_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t pm_hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { /* a word at a time: an image's 3.6 MB in a few ms */
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

#endif
