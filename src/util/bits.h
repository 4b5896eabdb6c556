/* bits.h — masks kept a bit per token and used a byte per token (0 / 1): the two conversions, and
 * a byte mask laid on logits. */
#ifndef PM_BITS_H
#define PM_BITS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* out[i] = bit i of bits, for i < n: eight bytes at a time from a table of the 256 byte values. */
static inline void pm_bits_expand(const uint64_t *bits, size_t n, uint8_t *out) {
    uint8_t lut[256][8];
    for (int b = 0; b < 256; b++)
        for (int j = 0; j < 8; j++) lut[b][j] = (uint8_t)(b >> j & 1);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) memcpy(out + i, lut[bits[i >> 6] >> (i & 63) & 255], 8);
    for (; i < n; i++) out[i] = (uint8_t)(bits[i >> 6] >> (i & 63) & 1);
}

/* bits[i / 64] bit i % 64 = (in[i] != 0), for i < n; the last word's bits past n cleared. */
static inline void pm_bits_pack(const uint8_t *in, size_t n, uint64_t *bits) {
    for (size_t w = 0; w * 64 < n; w++) {
        uint64_t x = 0;
        size_t m = n - w * 64 < 64 ? n - w * 64 : 64;
        for (size_t j = 0; j < m; j++) x |= (uint64_t)(in[w * 64 + j] != 0) << j;
        bits[w] = x;
    }
}

/* logits[v] = -INFINITY where allow[v] is 0, for v < n: a select, not a branch (a mask that keeps
 * every other token would mispredict one: ~0.3 ms over 200k tokens). */
static inline void pm_mask_logits(const uint8_t *allow, float *logits, size_t n) {
    const uint32_t neg_inf = 0xff800000u; /* -INFINITY's bits */
    for (size_t v = 0; v < n; v++) {
        uint32_t x, keep = 0u - (uint32_t)(allow[v] != 0);
        memcpy(&x, &logits[v], 4);
        x = (x & keep) | (neg_inf & ~keep);
        memcpy(&logits[v], &x, 4);
    }
}

#endif
