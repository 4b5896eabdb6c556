/* base64.h — a strict RFC 4648 base64 decoder (standard alphabet, '=' padding required, no
 * whitespace, no non-zero leftover bits) for media sent inline in requests. */
#ifndef PM_SRV_BASE64_H
#define PM_SRV_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Decodes in[0..n) into a malloc'd buffer (*out, *out_len). Returns 0, or -1 with a message in
 * err naming the offset of the first bad character (or -2 when out of memory). An empty input
 * decodes to an empty buffer. */
int srv_b64_decode(const char *in, size_t n, uint8_t **out, size_t *out_len, char *err, size_t errlen);

/* Encodes (for tests and the load tool's inputs); malloc'd and NUL-terminated, NULL on OOM. */
char *srv_b64_encode(const uint8_t *in, size_t n, size_t *out_len);

#endif
