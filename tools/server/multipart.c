/* multipart.c — see multipart.h. The body is already bounded by the HTTP layer; this parser
 * bounds everything else (boundary length, header block size, part count) and never copies data. */
#include "multipart.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* Reads a parameter value (token or quoted-string) into out; returns the position after it. */
static const char *read_value(const char *p, const char *end, char *out, size_t cap, int *ok) {
    size_t o = 0;
    *ok = 1;
    if (p < end && *p == '"') {
        p++;
        while (p < end && *p != '"') {
            if (*p == '\\' && p + 1 < end) p++;
            if (o + 1 < cap) out[o++] = *p;
            else *ok = 0;
            p++;
        }
        if (p >= end) *ok = 0;
        else p++;
    } else {
        while (p < end && *p != ';' && *p != ' ' && *p != '\t') {
            if (o + 1 < cap) out[o++] = *p;
            else *ok = 0;
            p++;
        }
    }
    out[o] = 0;
    return p;
}

int srv_multipart_boundary(const char *ct, char *boundary, size_t cap, char *err, size_t errlen) {
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) || (ct[19] && ct[19] != ';' && ct[19] != ' ')) {
        snprintf(err, errlen, "Content-Type must be multipart/form-data (got '%s')", ct ? ct : "none");
        return -1;
    }
    const char *end = ct + strlen(ct), *p = ct + 19;
    while (p < end) {
        p = skip_ws(p, end);
        if (p < end && *p == ';') {
            p = skip_ws(p + 1, end);
            continue;
        }
        const char *eq = p;
        while (eq < end && *eq != '=' && *eq != ';') eq++;
        if (eq >= end || *eq != '=') break;
        int is_b = (size_t)(eq - p) == 8 && !strncasecmp(p, "boundary", 8);
        char val[SRV_MP_MAX_BOUNDARY + 2];
        int ok;
        p = read_value(eq + 1, end, val, sizeof val, &ok);
        if (is_b) {
            size_t bl = strlen(val);
            if (!ok || bl == 0 || bl > SRV_MP_MAX_BOUNDARY || bl + 1 > cap) {
                snprintf(err, errlen, "multipart boundary must be 1 to %d characters", SRV_MP_MAX_BOUNDARY);
                return -1;
            }
            memcpy(boundary, val, bl + 1);
            return 0;
        }
    }
    snprintf(err, errlen, "multipart/form-data Content-Type has no boundary parameter");
    return -1;
}

/* Parses one part's header block [p, end) (CRLF-separated lines). */
static int parse_headers(const char *p, const char *end, srv_part *part, int idx, char *err, size_t errlen) {
    int has_disp = 0;
    while (p < end) {
        const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (!eol) eol = end;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (!colon) {
            snprintf(err, errlen, "multipart part %d: malformed header line", idx + 1);
            return -1;
        }
        size_t nl = (size_t)(colon - p);
        const char *v = skip_ws(colon + 1, eol);
        if (nl == 19 && !strncasecmp(p, "Content-Disposition", 19)) {
            has_disp = 1;
            if ((size_t)(eol - v) < 9 || strncasecmp(v, "form-data", 9)) {
                snprintf(err, errlen, "multipart part %d: Content-Disposition must be form-data", idx + 1);
                return -1;
            }
            const char *q = v + 9;
            while (q < eol) {
                q = skip_ws(q, eol);
                if (q < eol && *q == ';') {
                    q = skip_ws(q + 1, eol);
                    continue;
                }
                const char *eq = q;
                while (eq < eol && *eq != '=' && *eq != ';') eq++;
                if (eq >= eol || *eq != '=') break;
                size_t kl = (size_t)(eq - q);
                char tmp[256];
                int ok;
                const char *key = q;
                q = read_value(eq + 1, eol, tmp, sizeof tmp, &ok);
                if (!ok) {
                    snprintf(err, errlen, "multipart part %d: Content-Disposition parameter too long or unterminated", idx + 1);
                    return -1;
                }
                if (kl == 4 && !strncasecmp(key, "name", 4)) {
                    if (strlen(tmp) >= sizeof part->name) {
                        snprintf(err, errlen, "multipart part %d: field name too long", idx + 1);
                        return -1;
                    }
                    strcpy(part->name, tmp);
                } else if (kl == 8 && !strncasecmp(key, "filename", 8)) {
                    snprintf(part->filename, sizeof part->filename, "%s", tmp);
                    part->has_filename = 1;
                }
            }
        } else if (nl == 12 && !strncasecmp(p, "Content-Type", 12)) {
            size_t vl = (size_t)(eol - v);
            if (vl >= sizeof part->content_type) vl = sizeof part->content_type - 1;
            memcpy(part->content_type, v, vl);
            part->content_type[vl] = 0;
        }
        p = eol + 2;
    }
    if (!has_disp || !part->name[0]) {
        snprintf(err, errlen, "multipart part %d has no Content-Disposition form-data name", idx + 1);
        return -1;
    }
    return 0;
}

/* The next real delimiter in [p, end): CRLF--boundary followed by "--" or optional blanks and
 * CRLF. A boundary-like run inside the data that is followed by anything else is data. */
static const char *find_delim(const char *p, const char *end, const char *delim, size_t dl) {
    while (p < end) {
        const char *f = memmem(p, (size_t)(end - p), delim, dl);
        if (!f) return NULL;
        const char *q = f + dl;
        if (end - q >= 2 && q[0] == '-' && q[1] == '-') return f;
        q = skip_ws(q, end);
        if (end - q >= 2 && q[0] == '\r' && q[1] == '\n') return f;
        p = f + 1;
    }
    return NULL;
}

int srv_multipart_parse(const uint8_t *body, size_t n, const char *boundary, srv_part *parts, int max_parts, int *n_parts,
                        char *err, size_t errlen) {
    *n_parts = 0;
    size_t bl = strlen(boundary);
    if (bl == 0 || bl > SRV_MP_MAX_BOUNDARY) {
        snprintf(err, errlen, "bad multipart boundary");
        return -1;
    }
    char delim[SRV_MP_MAX_BOUNDARY + 5];
    snprintf(delim, sizeof delim, "\r\n--%s", boundary);
    size_t dl = bl + 4;
    const char *b = (const char *)body, *end = b + n, *p;
    /* The first delimiter may open the body without the leading CRLF. */
    if (n >= dl - 2 && !memcmp(b, delim + 2, dl - 2)) p = b + dl - 2;
    else {
        const char *f = memmem(b, n, delim, dl);
        if (!f) {
            snprintf(err, errlen, "multipart body does not contain the boundary given in Content-Type");
            return -1;
        }
        p = f + dl;
    }
    for (;;) {
        if (end - p >= 2 && p[0] == '-' && p[1] == '-') return 0; /* closing delimiter */
        p = skip_ws(p, end);
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
            snprintf(err, errlen, "multipart body is malformed after a boundary (expected CRLF)");
            return -1;
        }
        p += 2;
        if (*n_parts >= max_parts) {
            snprintf(err, errlen, "multipart body has more than %d parts", max_parts);
            return -1;
        }
        size_t avail = (size_t)(end - p);
        if (avail > SRV_MP_MAX_HEADERS) avail = SRV_MP_MAX_HEADERS;
        const char *hend;
        if (avail >= 2 && p[0] == '\r' && p[1] == '\n') hend = p; /* no headers at all */
        else {
            hend = memmem(p, avail, "\r\n\r\n", 4);
            if (!hend) {
                snprintf(err, errlen, "multipart part %d: headers are unterminated or longer than %d bytes", *n_parts + 1,
                         SRV_MP_MAX_HEADERS);
                return -1;
            }
        }
        srv_part *part = &parts[*n_parts];
        memset(part, 0, sizeof *part);
        if (parse_headers(p, hend, part, *n_parts, err, errlen)) return -1;
        const char *data = hend == p ? p + 2 : hend + 4;
        const char *next = find_delim(data, end, delim, dl);
        if (!next) {
            snprintf(err, errlen, "multipart part %d ('%s') is not closed by a boundary (body truncated?)", *n_parts + 1, part->name);
            return -1;
        }
        part->data = (const uint8_t *)data;
        part->len = (size_t)(next - data);
        (*n_parts)++;
        p = next + dl;
    }
}

const srv_part *srv_multipart_find(const srv_part *parts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(parts[i].name, name)) return &parts[i];
    return NULL;
}
