/* dataurl.h — RFC 2397 data: URLs as OpenAI clients send images: data:<type>/<subtype>[;param]*;base64,<data>.
 * Only the base64 form is accepted (media is binary). */
#ifndef PM_SRV_DATAURL_H
#define PM_SRV_DATAURL_H

#include <stddef.h>

typedef struct srv_data_url {
    char media_type[96];    /* lower-cased "image/png"; "" when the URL names none */
    const char *payload;    /* points into the URL: the base64 text after the comma */
    size_t payload_len;
} srv_data_url;

/* Returns 1 when url[0..n) starts with "data:" (case-insensitive), else 0. */
int srv_is_data_url(const char *url, size_t n);

/* Splits a data: URL. Returns 0, or -1 with a message (no comma, not base64, bad media type). */
int srv_data_url_parse(const char *url, size_t n, srv_data_url *out, char *err, size_t errlen);

#endif
