/* driver_util.h — what the test drivers (tests/tools/*_driver.c) share: their line protocol's
 * argument, the bytes of a text written as hex (so any pattern, grammar or text passes whole). */
#ifndef PM_DRIVER_UTIL_H
#define PM_DRIVER_UTIL_H

#include <stdio.h>

/* The bytes of the hex digits at h (up to a newline or the end) into out; their count. */
static size_t unhex(const char *h, char *out) {
    size_t n = 0;
    for (; h[0] && h[1] && h[0] != '\n'; h += 2) {
        unsigned v;
        if (sscanf(h, "%2x", &v) != 1) break;
        out[n++] = (char)v;
    }
    return n;
}

#endif
