/* dataurl.c — see dataurl.h. */
#include "dataurl.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int srv_is_data_url(const char *url, size_t n) { return n >= 5 && !strncasecmp(url, "data:", 5); }

/* strchr() finds the terminator too, so NUL must be excluded explicitly (found by fuzzing). */
static int token_char(char c) { return isalnum((unsigned char)c) || (c && strchr("!#$&^_.+-", c)); }

int srv_data_url_parse(const char *url, size_t n, srv_data_url *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!srv_is_data_url(url, n)) {
        snprintf(err, errlen, "not a data: URL");
        return -1;
    }
    const char *p = url + 5, *end = url + n;
    const char *comma = memchr(p, ',', (size_t)(end - p));
    if (!comma) {
        snprintf(err, errlen, "malformed data: URL (no ',' before the data)");
        return -1;
    }
    /* header = [type/subtype] *(;param) ;base64 */
    size_t hl = (size_t)(comma - p);
    if (hl < 7 || strncasecmp(comma - 7, ";base64", 7)) {
        snprintf(err, errlen, "data: URL must be base64-encoded (\"data:<type>;base64,<data>\")");
        return -1;
    }
    const char *semi = memchr(p, ';', hl);
    size_t tl = (size_t)(semi - p);
    if (tl >= sizeof out->media_type) {
        snprintf(err, errlen, "data: URL media type is too long");
        return -1;
    }
    int slash = 0;
    for (size_t i = 0; i < tl; i++) {
        char c = p[i];
        if (c == '/') slash++;
        else if (!token_char(c)) {
            snprintf(err, errlen, "data: URL media type has an invalid character at offset %zu", (size_t)(p + i - url));
            return -1;
        }
        out->media_type[i] = (char)tolower((unsigned char)c);
    }
    out->media_type[tl] = 0;
    if (tl && (slash != 1 || p[0] == '/' || p[tl - 1] == '/')) {
        snprintf(err, errlen, "data: URL media type '%s' is not of the form type/subtype", out->media_type);
        return -1;
    }
    out->payload = comma + 1;
    out->payload_len = (size_t)(end - comma - 1);
    return 0;
}
