/* utf8.c — lossy UTF-8 decoding (maximal subpart rule) and a small byte buffer; see utf8.h. */
#include "tok/utf8.h"

#include <stdlib.h>
#include <string.h>

int pm_buf_put(pm_buf *b, const void *src, size_t n, pm_err *e) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) return pm_errf(e, PM_ENOMEM, "buffer: size overflow");
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) return pm_errf(e, PM_ENOMEM, "out of memory growing a text buffer to %zu bytes", cap);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    b->p[b->len] = 0;
    return PM_OK;
}

int pm_buf_take(pm_buf *b, char **out, size_t *out_len, pm_err *e) {
    if (!b->p) {
        int rc = pm_buf_put(b, "", 0, e);
        if (rc) return rc;
    }
    *out = b->p;
    if (out_len) *out_len = b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return PM_OK;
}

void pm_buf_free(pm_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* Valid range of the second byte for lead byte c (continuation bytes after it are always 80..BF). */
static void second_range(uint8_t c, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (c == 0xE0) *lo = 0xA0;
    else if (c == 0xED) *hi = 0x9F;
    else if (c == 0xF0) *lo = 0x90;
    else if (c == 0xF4) *hi = 0x8F;
}

/* Scans one character at s[i..n). Returns its length if complete and valid; otherwise 0 and sets *bad to the
 * length of the maximal ill-formed subsequence to replace (>= 1), or *bad = 0 if the input ended while the
 * sequence was still valid (an incomplete tail). */
static size_t scan_char(const uint8_t *s, size_t n, size_t i, size_t *bad) {
    uint8_t c = s[i];
    *bad = 0;
    if (c < 0x80) return 1;
    size_t need = pm_utf8_len(c);
    if (need == 1) { /* 80..C1, F5..FF */
        *bad = 1;
        return 0;
    }
    uint8_t lo, hi;
    second_range(c, &lo, &hi);
    size_t k = 1;
    for (; k < need; k++) {
        if (i + k >= n) return 0; /* incomplete tail, still valid so far */
        uint8_t b = s[i + k];
        if (b < lo || b > hi) {
            *bad = k;
            return 0;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return need;
}

size_t pm_utf8_valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad, l = scan_char(s, n, i, &bad);
        if (!l) return i;
        i += l;
    }
    return n;
}

int pm_utf8_lossy(const uint8_t *s, size_t n, int final, pm_buf *out, size_t *held, pm_err *e) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    size_t i = 0, run = 0; /* run: start of the pending valid stretch */
    if (held) *held = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad, l = scan_char(s, n, i, &bad);
        if (l) {
            i += l;
            continue;
        }
        int rc = pm_buf_put(out, s + run, i - run, e);
        if (rc) return rc;
        if (!bad) { /* incomplete tail */
            if (final) {
                rc = pm_buf_put(out, fffd, 3, e);
                if (rc) return rc;
            } else if (held) {
                *held = n - i;
            }
            return PM_OK;
        }
        rc = pm_buf_put(out, fffd, 3, e);
        if (rc) return rc;
        i += bad;
        run = i;
    }
    return pm_buf_put(out, n ? (const void *)(s + run) : "", i - run, e); /* s may be NULL when n == 0 */
}

uint32_t pm_utf8_decode(const uint8_t *s, size_t n, size_t *len) {
    uint8_t c = s[0];
    size_t l = pm_utf8_len(c);
    if (l > n) l = 1;
    *len = l;
    switch (l) {
    case 2: return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    case 4:
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
               (s[3] & 0x3F);
    default: return c;
    }
}

size_t pm_utf8_encode(uint32_t c, uint8_t *o) {
    if (c < 0x80) {
        o[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (uint8_t)(0xC0 | (c >> 6));
        o[1] = (uint8_t)(0x80 | (c & 63));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (c >> 12));
        o[1] = (uint8_t)(0x80 | ((c >> 6) & 63));
        o[2] = (uint8_t)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (c >> 18));
    o[1] = (uint8_t)(0x80 | ((c >> 12) & 63));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 63));
    o[3] = (uint8_t)(0x80 | (c & 63));
    return 4;
}
