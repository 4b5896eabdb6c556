/* json_util.h — jansson with the guards a server needs: a nesting-depth limit checked before
 * parsing (jansson has none), duplicate keys refused, UTF-8-safe strings from model text, the
 * OpenAI error body, and the small typed getters the request parsers share. */
#ifndef PM_SRV_JSON_UTIL_H
#define PM_SRV_JSON_UTIL_H

#include <jansson.h>
#include <stddef.h>

#include "server.h"

/* Maximum nesting of arrays/objects accepted in a request body, and of values in it: jansson
 * spends ~40 bytes per value, so a 40 MB body of 20 million zeros took 850 MB to parse (a chat
 * request of ten thousand messages has well under 100,000). */
enum { SRV_JSON_MAX_DEPTH = 64, SRV_JSON_MAX_VALUES = 200000 };

/* Returns 1 when the nesting of [ and { in buf (outside strings) never exceeds max_depth. */
int srv_json_depth_ok(const char *buf, size_t len, int max_depth);
/* An upper bound on the number of values in buf (every [ and { and every , outside strings, + 1),
 * counted without parsing. */
size_t srv_json_count_values(const char *buf, size_t len);

/* Parses a request body: depth and value-count limits, then json_loadb with duplicate keys
 * refused. On failure returns NULL and fills e (400, code "invalid_json", message with line and
 * column). */
json_t *srv_json_parse(const char *buf, size_t len, int max_depth, srv_error *e);

/* Length of the longest prefix of s[0..n) that is valid UTF-8 and ends on a character boundary. */
size_t srv_utf8_valid_prefix(const char *s, size_t n);
/* A JSON string from bytes that should be UTF-8; invalid sequences become U+FFFD. NULL only on OOM. */
json_t *srv_json_text(const char *s, size_t n);

/* Compact serialisation (malloc'd, NUL-terminated); NULL on OOM. */
char *srv_json_dump(const json_t *v, size_t *len);

/* {"error": {"message", "type", "param", "code"}} for e (malloc'd). */
char *srv_error_body(const srv_error *e, size_t *len);

/* Typed optional fields. Each returns 0 when the key is absent or null (out untouched), 1 when
 * present and valid, and -1 after filling e with a 400 naming the parameter. */
int srv_get_int(const json_t *obj, const char *key, long long lo, long long hi, long long *out, srv_error *e);
int srv_get_num(const json_t *obj, const char *key, double lo, double hi, double *out, srv_error *e);
int srv_get_bool(const json_t *obj, const char *key, int *out, srv_error *e);
int srv_get_str(const json_t *obj, const char *key, const char **out, srv_error *e);

#endif
