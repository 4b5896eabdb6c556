/* utf8.h — the one lossy UTF-8 policy of the tokenizer (WHATWG decoder, Unicode "maximal subpart" rule).
 *
 * Every maximal ill-formed subsequence becomes one U+FFFD (EF BF BD); a BOM is kept; nothing else changes. The
 * streaming form holds back an incomplete tail that may still become a valid character and emits U+FFFD as soon
 * as bytes are known to be invalid, exactly like a WHATWG TextDecoder with {stream: true}. The same routine
 * repairs invalid input before encoding and turns token bytes into text after decoding. */
#ifndef PM_TOK_UTF8_H
#define PM_TOK_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* A growable byte buffer (always NUL-terminated after pm_buf_put succeeds). */
typedef struct pm_buf {
    char *p;
    size_t len, cap;
} pm_buf;

/* Appends n bytes; PM_ENOMEM on failure. */
int pm_buf_put(pm_buf *b, const void *src, size_t n, pm_err *e);
/* Hands the buffer to the caller as a malloc'd NUL-terminated string ("" if empty) and resets b. */
int pm_buf_take(pm_buf *b, char **out, size_t *out_len, pm_err *e);
void pm_buf_free(pm_buf *b);

/* Length of the longest valid UTF-8 prefix of s[0..n). */
size_t pm_utf8_valid_prefix(const uint8_t *s, size_t n);

/* Lossily decodes s[0..n) and appends the text to out. With final != 0 an incomplete tail becomes U+FFFD; with
 * final == 0 it is left undecoded and its length (0..3) is stored in *held (held may be NULL only when final). */
int pm_utf8_lossy(const uint8_t *s, size_t n, int final, pm_buf *out, size_t *held, pm_err *e);

/* Length in bytes of the UTF-8 character that starts with lead byte c (1 for invalid leads). */
static inline size_t pm_utf8_len(uint8_t c) {
    return c < 0x80 ? 1 : c < 0xE0 ? (c < 0xC2 ? 1 : 2) : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 1;
}

/* Decodes the code point at s[0..n) (valid UTF-8 assumed, n >= 1); stores its length in *len. */
uint32_t pm_utf8_decode(const uint8_t *s, size_t n, size_t *len);
/* Encodes cp into o (4 bytes room); returns its length. */
size_t pm_utf8_encode(uint32_t cp, uint8_t *o);

#endif
