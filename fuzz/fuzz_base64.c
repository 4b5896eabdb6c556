/* fuzz_base64.c — libFuzzer harness for inline media encodings: the strict base64 decoder
 * srv_b64_decode / encoder srv_b64_encode, and RFC 2397 data: URLs (srv_is_data_url,
 * srv_data_url_parse, then the payload through the decoder as the chat route does).
 *
 * First input byte (mod 3) picks the mode, the rest is the payload:
 *   0  decode. A strict decoder is canonical: encode(decode(x)) == x for every accepted x, and the
 *      decoded length is 3/4 of the input less the padding;
 *   1  encode arbitrary bytes, then decode: the round trip is the identity;
 *   2  data: URL. An accepted URL has a lower-case media type of the form type/subtype (or none)
 *      and a payload that is a suffix of the URL. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/server/base64.h"
#include "../tools/server/dataurl.h"
#include "fuzz_util.h"

static void mode_decode(const char *s, size_t n) {
    uint8_t *out = NULL;
    size_t ol = 0;
    char err[256];
    err[0] = 0;
    int rc = srv_b64_decode(s, n, &out, &ol, err, sizeof err);
    if (rc == 0) {
        FUZZ_CHECK(out != NULL && n % 4 == 0);
        FUZZ_CHECK(ol <= n / 4 * 3 && ol + 2 >= n / 4 * 3);
        size_t el = 0;
        char *enc = srv_b64_encode(out, ol, &el);
        FUZZ_CHECK(enc && el == n && memcmp(enc, s, n) == 0);
        free(enc);
        free(out);
    } else {
        FUZZ_CHECK(rc == -1 && out == NULL && ol == 0 && err[0]);
    }
}

static void mode_roundtrip(const uint8_t *p, size_t n) {
    size_t el = 0;
    char *enc = srv_b64_encode(p, n, &el);
    FUZZ_CHECK(enc && el == (n + 2) / 3 * 4 && strlen(enc) == el);
    uint8_t *out = NULL;
    size_t ol = 0;
    char err[256];
    FUZZ_CHECK(srv_b64_decode(enc, el, &out, &ol, err, sizeof err) == 0);
    FUZZ_CHECK(ol == n && (n == 0 || memcmp(out, p, n) == 0));
    free(out);
    free(enc);
}

static void mode_dataurl(const char *s, size_t n) {
    srv_data_url d;
    char err[256];
    err[0] = 0;
    int is = srv_is_data_url(s, n);
    if (srv_data_url_parse(s, n, &d, err, sizeof err) == 0) {
        FUZZ_CHECK(is);
        FUZZ_CHECK(d.payload >= s && d.payload + d.payload_len == s + n);
        size_t tl = strlen(d.media_type);
        FUZZ_CHECK(tl < sizeof d.media_type);
        for (size_t i = 0; i < tl; i++) FUZZ_CHECK(!isupper((unsigned char)d.media_type[i]));
        if (tl) FUZZ_CHECK(strchr(d.media_type, '/') && d.media_type[0] != '/' && d.media_type[tl - 1] != '/');
        mode_decode(d.payload, d.payload_len);
    } else {
        FUZZ_CHECK(err[0]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    /* A private exact-size copy so a read past the end is an ASan report. */
    size_t n = size - 1;
    char *p = malloc(n ? n : 1);
    memcpy(p, data + 1, n);
    switch (data[0] % 3) {
    case 0: mode_decode(p, n); break;
    case 1: mode_roundtrip((const uint8_t *)p, n); break;
    default: mode_dataurl(p, n); break;
    }
    free(p);
    return 0;
}
