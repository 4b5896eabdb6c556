/* json_util.c — see json_util.h. */
#include "json_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail_v(srv_error *e, int http, const char *type, const char *param, const char *code, const char *fmt, va_list ap) {
    e->http = http;
    snprintf(e->type, sizeof e->type, "%s", type ? type : "invalid_request_error");
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    return -1;
}

int srv_fail(srv_error *e, int http, const char *type, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(e, http, type, param, code, fmt, ap);
    va_end(ap);
    return -1;
}

int srv_bad(srv_error *e, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(e, 400, NULL, param, code, fmt, ap);
    va_end(ap);
    return -1;
}

void srv_status_error(int rc, const char *msg, srv_error *e) {
    switch (rc) {
    case PM_EINVAL:
    case PM_EFORMAT:
    case PM_EUNSUPPORTED:
        srv_bad(e, NULL, "invalid_request", "%s", msg);
        break;
    case PM_EPLACEHOLDER: srv_bad(e, NULL, "placeholder_mismatch", "%s", msg); break;
    case PM_ECONTEXT: /* OpenAI's code for a prompt that does not fit, which clients act on (trimming the history) */
        srv_bad(e, NULL, "context_length_exceeded", "%s", msg);
        break;
    case PM_ELIMIT: srv_bad(e, NULL, "limit_exceeded", "%s", msg); break;
    case PM_ENOMEM: srv_fail(e, 503, "server_error", NULL, "out_of_memory", "%s", msg); break;
    case PM_EBUSY: srv_fail(e, 503, "server_error", NULL, "overloaded", "%s", msg); break;
    case PM_ECANCELED: srv_fail(e, 499, "invalid_request_error", NULL, "cancelled", "%s", msg); break;
    default: srv_fail(e, 500, "server_error", NULL, "internal_error", "%s", msg); break;
    }
}

/* One pass over buf outside strings: the deepest nesting of [ and {, and an upper bound on the
 * number of values (every [ and { and every , plus one). */
static void json_shape(const char *buf, size_t len, int *deepest, size_t *values) {
    int depth = 0, in_str = 0, esc = 0;
    *deepest = 0;
    *values = 1;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (in_str) {
            if (esc) esc = 0;
            else if (c == '\\') esc = 1;
            else if (c == '"') in_str = 0;
        } else if (c == '"') in_str = 1;
        else if (c == '[' || c == '{') {
            if (++depth > *deepest) *deepest = depth;
            ++*values;
        } else if (c == ',') ++*values;
        else if ((c == ']' || c == '}') && depth > 0) depth--;
    }
}

int srv_json_depth_ok(const char *buf, size_t len, int max_depth) {
    int deepest;
    size_t values;
    json_shape(buf, len, &deepest, &values);
    return deepest <= max_depth;
}

size_t srv_json_count_values(const char *buf, size_t len) {
    int deepest;
    size_t values;
    json_shape(buf, len, &deepest, &values);
    return values;
}

json_t *srv_json_parse(const char *buf, size_t len, int max_depth, srv_error *e) {
    if (len == 0) {
        srv_bad(e, NULL, "invalid_json", "the request body is empty; expected a JSON object");
        return NULL;
    }
    int deepest;
    size_t values;
    json_shape(buf, len, &deepest, &values);
    if (deepest > max_depth) {
        srv_bad(e, NULL, "invalid_json", "the request JSON nests deeper than %d levels", max_depth);
        return NULL;
    }
    if (values > SRV_JSON_MAX_VALUES) {
        srv_bad(e, NULL, "invalid_json", "the request JSON holds ~%zu values, more than the limit of %d", values, SRV_JSON_MAX_VALUES);
        return NULL;
    }
    json_error_t je;
    json_t *v = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!v) {
        srv_bad(e, NULL, "invalid_json", "could not parse the request body as JSON: %s (line %d, column %d)", je.text, je.line,
                je.column);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        srv_bad(e, NULL, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    return v;
}

/* Length of the UTF-8 sequence starting at s (n bytes available), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    unsigned cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

size_t srv_utf8_valid_prefix(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = utf8_seq(u + i, n - i);
        if (!l) break;
        i += l;
    }
    return i;
}

json_t *srv_json_text(const char *s, size_t n) {
    if (srv_utf8_valid_prefix(s, n) == n) return json_stringn(s, n);
    char *buf = malloc(n * 3 + 1);
    if (!buf) return NULL;
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (l) {
            memcpy(buf + o, s + i, l);
            o += l;
            i += l;
        } else {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    json_t *v = json_stringn(buf, o);
    free(buf);
    return v;
}

char *srv_json_dump(const json_t *v, size_t *len) {
    char *s = json_dumps(v, JSON_COMPACT);
    if (s && len) *len = strlen(s);
    return s;
}

char *srv_error_body(const srv_error *e, size_t *len) {
    json_t *err = json_object();
    json_object_set_new(err, "message", json_string(e->msg[0] ? e->msg : "error"));
    json_object_set_new(err, "type", json_string(e->type[0] ? e->type : "invalid_request_error"));
    json_object_set_new(err, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(err, "code", e->code[0] ? json_string(e->code) : json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", err);
    char *s = srv_json_dump(root, len);
    json_decref(root);
    return s;
}

int srv_get_int(const json_t *obj, const char *key, long long lo, long long hi, long long *out, srv_error *e) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v);
    else return srv_bad(e, key, "invalid_type", "%s must be an integer", key);
    if (x < lo || x > hi) return srv_bad(e, key, "invalid_value", "%s must be between %lld and %lld (got %lld)", key, lo, hi, x);
    *out = x;
    return 1;
}

int srv_get_num(const json_t *obj, const char *key, double lo, double hi, double *out, srv_error *e) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return srv_bad(e, key, "invalid_type", "%s must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return srv_bad(e, key, "invalid_value", "%s must be between %g and %g (got %g)", key, lo, hi, x);
    *out = x;
    return 1;
}

int srv_get_bool(const json_t *obj, const char *key, int *out, srv_error *e) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return srv_bad(e, key, "invalid_type", "%s must be true or false", key);
    *out = json_is_true(v);
    return 1;
}

int srv_get_str(const json_t *obj, const char *key, const char **out, srv_error *e) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return srv_bad(e, key, "invalid_type", "%s must be a string", key);
    *out = json_string_value(v);
    return 1;
}
