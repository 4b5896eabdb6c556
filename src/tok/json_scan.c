/* json_scan.c — strict JSON pull parsing over a memory buffer (see json_scan.h). */
#include "tok/json_scan.h"

#include <stdlib.h>
#include <string.h>

int pm_js_fail(pm_js *j, pm_err *e, const char *what) {
    int line = 1, col = 1;
    for (const char *q = j->start; q < j->p && q < j->end; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    return pm_errf(e, PM_EFORMAT, "%s: line %d column %d: %s", j->name, line, col, what);
}

char pm_js_peek(pm_js *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')) j->p++;
    return j->p < j->end ? *j->p : 0;
}

int pm_js_expect(pm_js *j, char c, pm_err *e) {
    if (pm_js_peek(j) != c) {
        char msg[32] = "expected ' '";
        msg[10] = c;
        return pm_js_fail(j, e, msg);
    }
    j->p++;
    return PM_OK;
}

static int hex4(const char *s, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (unsigned)d;
    }
    return 0;
}

int pm_js_string(pm_js *j, pm_buf *out, pm_err *e) {
    out->len = 0;
    int rc = pm_js_expect(j, '"', e);
    if (rc) return rc;
    for (;;) {
        const char *q = j->p;
        while (q < j->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) q++;
        if ((rc = pm_buf_put(out, j->p, (size_t)(q - j->p), e))) return rc;
        j->p = q;
        if (q >= j->end) return pm_js_fail(j, e, "unterminated string");
        if (*q == '"') {
            j->p++;
            break;
        }
        if (*q != '\\') return pm_js_fail(j, e, "control character in string");
        if (q + 1 >= j->end) return pm_js_fail(j, e, "unterminated escape");
        char c = q[1], ch;
        j->p = q + 2;
        switch (c) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            unsigned u, lo;
            if (j->end - j->p < 4 || hex4(j->p, &u)) return pm_js_fail(j, e, "bad \\u escape");
            j->p += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return pm_js_fail(j, e, "unpaired surrogate in \\u escape");
                j->p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            } else if (u >= 0xDC00 && u <= 0xDFFF) {
                return pm_js_fail(j, e, "unpaired surrogate in \\u escape");
            }
            uint8_t b[4];
            size_t n = pm_utf8_encode(u, b);
            if ((rc = pm_buf_put(out, b, n, e))) return rc;
            continue;
        }
        default: return pm_js_fail(j, e, "bad escape");
        }
        if ((rc = pm_buf_put(out, &ch, 1, e))) return rc;
    }
    if (pm_utf8_valid_prefix((const uint8_t *)out->p, out->len) != out->len) return pm_js_fail(j, e, "string is not valid UTF-8");
    return PM_OK;
}

int pm_js_int(pm_js *j, long long *v, pm_err *e) {
    pm_js_peek(j);
    const char *q = j->p;
    int neg = 0;
    if (q < j->end && *q == '-') neg = 1, q++;
    if (q >= j->end || *q < '0' || *q > '9') return pm_js_fail(j, e, "expected an integer");
    long long x = 0;
    while (q < j->end && *q >= '0' && *q <= '9') {
        if (x > 100000000000LL) return pm_js_fail(j, e, "integer too large");
        x = x * 10 + (*q++ - '0');
    }
    if (q < j->end && (*q == '.' || *q == 'e' || *q == 'E')) return pm_js_fail(j, e, "expected an integer");
    j->p = q;
    *v = neg ? -x : x;
    return PM_OK;
}

static int skip_value(pm_js *j, int depth, pm_err *e) {
    if (depth > 200) return pm_js_fail(j, e, "nesting too deep");
    char c = pm_js_peek(j);
    int rc, more;
    if (c == '"') {
        j->p++;
        while (j->p < j->end && *j->p != '"') {
            if ((unsigned char)*j->p < 0x20) return pm_js_fail(j, e, "control character in string");
            if (*j->p == '\\' && j->p + 1 >= j->end) return pm_js_fail(j, e, "unterminated escape");
            j->p += *j->p == '\\' ? 2 : 1;
        }
        if (j->p >= j->end) return pm_js_fail(j, e, "unterminated string");
        j->p++;
        return PM_OK;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        for (int first = 1;; first = 0) {
            if ((rc = pm_js_next(j, close, first, &more, e))) return rc;
            if (!more) return PM_OK;
            if (c == '{') {
                if (pm_js_peek(j) != '"') return pm_js_fail(j, e, "expected a key string");
                if ((rc = skip_value(j, depth + 1, e)) || (rc = pm_js_expect(j, ':', e))) return rc;
            }
            if ((rc = skip_value(j, depth + 1, e))) return rc;
        }
    }
    static const char *const lits[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(lits[i]);
        if ((size_t)(j->end - j->p) >= l && !memcmp(j->p, lits[i], l)) {
            j->p += l;
            return PM_OK;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *q = j->p + 1;
        while (q < j->end && *q && strchr("0123456789.eE+-", *q)) q++;
        j->p = q;
        return PM_OK;
    }
    return pm_js_fail(j, e, "expected a value");
}

int pm_js_skip(pm_js *j, const char **from, const char **to, pm_err *e) {
    pm_js_peek(j);
    *from = j->p;
    int rc = skip_value(j, 0, e);
    *to = j->p;
    return rc;
}

int pm_js_next(pm_js *j, char close, int first, int *more, pm_err *e) {
    char c = pm_js_peek(j);
    if (c == close) {
        j->p++;
        *more = 0;
        return PM_OK;
    }
    if (!first) {
        if (c != ',') return pm_js_fail(j, e, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
        j->p++;
        if (pm_js_peek(j) == close) return pm_js_fail(j, e, "trailing comma");
    }
    if (!pm_js_peek(j)) return pm_js_fail(j, e, "unexpected end of file");
    *more = 1;
    return PM_OK;
}
