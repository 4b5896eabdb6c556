/* multipart.h — a bounded multipart/form-data parser (RFC 7578) over a body held in memory.
 * Parts are views into the body; their names are copied into fixed fields. */
#ifndef PM_SRV_MULTIPART_H
#define PM_SRV_MULTIPART_H

#include <stddef.h>
#include <stdint.h>

enum { SRV_MP_MAX_BOUNDARY = 70, SRV_MP_MAX_HEADERS = 8192 };

typedef struct srv_part {
    char name[128];
    char filename[256];
    char content_type[128];
    int has_filename;
    const uint8_t *data;     /* into the body */
    size_t len;
} srv_part;

/* Extracts the boundary from a Content-Type header value ("multipart/form-data; boundary=..."),
 * quoted or not. Returns 0, or -1 with a message. */
int srv_multipart_boundary(const char *content_type, char *boundary, size_t cap, char *err, size_t errlen);

/* Splits body[0..n) into at most max_parts parts. Every part needs a Content-Disposition of type
 * form-data with a name; part headers are bounded by SRV_MP_MAX_HEADERS bytes. Text before the
 * first boundary (preamble) and after the closing one (epilogue) is ignored. Returns 0, or -1 with
 * a message (missing boundary, unterminated body, too many parts, bad headers). */
int srv_multipart_parse(const uint8_t *body, size_t n, const char *boundary, srv_part *parts, int max_parts, int *n_parts,
                        char *err, size_t errlen);

/* The first part named `name`, or NULL. */
const srv_part *srv_multipart_find(const srv_part *parts, int n, const char *name);

#endif
