/* json_scan.h — a small pull parser for the two big members of tokenizer.json.
 *
 * jansson builds a DOM: for tokenizer.json's 200k-entry vocabulary and 200k merges that costs about a second. The
 * loader instead walks the file with this scanner, decodes vocab keys and merge strings straight into its own
 * tables, and hands only the small members (added_tokens, pre_tokenizer, ...) to jansson via their byte spans.
 * Strict JSON (RFC 8259): errors report line and column. */
#ifndef PM_TOK_JSON_SCAN_H
#define PM_TOK_JSON_SCAN_H

#include <stddef.h>

#include "tok/utf8.h"
#include "util/err.h"

typedef struct pm_js {
    const char *start, *p, *end;
    const char *name; /* file name for messages */
} pm_js;

/* Skips whitespace; returns the next character or 0 at the end. */
char pm_js_peek(pm_js *j);
/* Consumes character c (after whitespace) or fails with "expected 'c'". */
int pm_js_expect(pm_js *j, char c, pm_err *e);
/* Parses a string into out (reset first; unescaped UTF-8, NUL-terminated, may contain NUL). */
int pm_js_string(pm_js *j, pm_buf *out, pm_err *e);
/* Parses an integer. */
int pm_js_int(pm_js *j, long long *v, pm_err *e);
/* Skips one value of any type; its span is [*from, *to). */
int pm_js_skip(pm_js *j, const char **from, const char **to, pm_err *e);
/* Object/array iteration: after the opening brace or bracket, call pm_js_next before each element: *more = 1 when
 * another element follows (its comma, if any, is consumed), 0 when close was consumed. first: 1 on the first call. */
int pm_js_next(pm_js *j, char close, int first, int *more, pm_err *e);
/* Records a syntax error at the current position. */
int pm_js_fail(pm_js *j, pm_err *e, const char *what);

#endif
