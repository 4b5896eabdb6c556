/* base64.c — see base64.h. Strictness is deliberate: a request whose media does not decode
 * exactly is refused with the offset of the problem rather than silently repaired. */
#include "base64.h"

#include <stdio.h>
#include <stdlib.h>

static int b64_val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static void describe(char *err, size_t errlen, const char *in, size_t at) {
    unsigned char c = (unsigned char)in[at];
    if (c >= 0x21 && c < 0x7F) snprintf(err, errlen, "invalid base64: unexpected character '%c' at offset %zu", c, at);
    else snprintf(err, errlen, "invalid base64: unexpected byte 0x%02X at offset %zu", c, at);
}

int srv_b64_decode(const char *in, size_t n, uint8_t **out, size_t *out_len, char *err, size_t errlen) {
    *out = NULL;
    *out_len = 0;
    if (n % 4) {
        /* Find a bad character first: it is the more useful message. */
        for (size_t i = 0; i < n; i++)
            if (b64_val((unsigned char)in[i]) < 0 && in[i] != '=') {
                describe(err, errlen, in, i);
                return -1;
            }
        snprintf(err, errlen, "invalid base64: length %zu is not a multiple of 4 (padding missing or data truncated)", n);
        return -1;
    }
    size_t pad = 0;
    if (n >= 1 && in[n - 1] == '=') pad++;
    if (n >= 2 && in[n - 2] == '=') pad++;
    uint8_t *buf = malloc(n / 4 * 3 + 1);
    if (!buf) {
        snprintf(err, errlen, "out of memory decoding base64");
        return -2;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int last = i + 4 == n;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)in[i + k];
            if (c == '=' && last && k >= 4 - (int)pad) {
                v[k] = 0;
                continue;
            }
            v[k] = b64_val(c);
            if (v[k] < 0) {
                free(buf);
                if (c == '=') snprintf(err, errlen, "invalid base64: '=' padding at offset %zu is not at the end", i + k);
                else describe(err, errlen, in, i + k);
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        buf[o++] = (uint8_t)(w >> 16);
        if (!last || pad < 2) buf[o++] = (uint8_t)(w >> 8);
        if (!last || pad < 1) buf[o++] = (uint8_t)w;
        if (last && ((pad == 1 && (v[2] & 0x3)) || (pad == 2 && (v[1] & 0xF)))) {
            free(buf);
            snprintf(err, errlen, "invalid base64: non-zero padding bits in the last group (offset %zu)", i);
            return -1;
        }
    }
    *out = buf;
    *out_len = o;
    return 0;
}

char *srv_b64_encode(const uint8_t *in, size_t n, size_t *out_len) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t m = (n + 2) / 3 * 4;
    char *s = malloc(m + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        s[o++] = tab[w >> 18 & 63];
        s[o++] = tab[w >> 12 & 63];
        s[o++] = i + 1 < n ? tab[w >> 6 & 63] : '=';
        s[o++] = i + 2 < n ? tab[w & 63] : '=';
    }
    s[o] = 0;
    if (out_len) *out_len = o;
    return s;
}
