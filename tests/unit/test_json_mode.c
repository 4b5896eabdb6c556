/* test_json_mode.c — the JSON-mode recognizer on documents written out here: every prefix of a
 * valid object is accepted and only the whole is complete, whatever the split; invalid ones fail
 * where RFC 8259 says they do; the mask over a real tokenizer keeps exactly the tokens whose bytes
 * continue the text, and the end tokens only after the object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_mode.h"
#include "tok/tokenizer.h"
#include "test_util.h"

static const char *const valid[] = {
    "{}",
    " \n{ }",
    "{\"a\":1}",
    "{\"a\": [1, -2.5e+10, 0, 0.0, 1E5, -0, 3e-2], \"b\": {\"c\": null, \"d\": true, \"e\": false}}",
    "{\"s\":\"x\\\"y\\\\z\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00\"}",
    "{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":\"\xe4\xb8\xad\xe6\x96\x87\"}",
    "{\"nested\":[[[{\"x\":[]}]],{}],\"k\":\"\"}",
    "{\"a\":[{}, [], \"\", 1]}",
    "{\r\n\t\"pretty\": [\r\n\t\t1,\r\n\t\t2\r\n\t]\r\n}",
};

static const char *const invalid[] = {
    "[1,2]",            /* the top is an object */
    "\"str\"",
    "{\"a\":01}",       /* leading zero */
    "{\"a\":1.}",
    "{\"a\":.5}",
    "{\"a\":+1}",
    "{\"a\":1e}",
    "{\"a\":-}",
    "{\"a\":tru}",
    "{\"a\":True}",
    "{a:1}",            /* unquoted key */
    "{\"a\" 1}",
    "{\"a\":1,}",       /* trailing comma */
    "{\"a\":[1,]}",
    "{\"a\":[1}",       /* mismatched close */
    "{\"a\":1]",
    "{\"a\":\"\\x\"}",   /* bad escape */
    "{\"a\":\"\\u12G4\"}",
    "{\"a\":\"tab\there\"}", /* raw control character */
    "{\"a\":\"\xc0\xaf\"}",  /* overlong */
    "{\"a\":\"\xed\xa0\x80\"}", /* a surrogate in UTF-8 */
    "{\"a\":\"\xf4\x90\x80\x80\"}", /* past U+10FFFF */
    "{\"a\":\"\xe2\x82\"}", /* truncated sequence */
    "{}x",              /* anything after the object */
    "{} ",
    "{\"a\":1}}",
    "{,}",
    "{\"a\":nul}",
};

/* Whether text is a prefix the recognizer accepts; *done: complete after it. */
static int accepts(const char *text, size_t n, int *done) {
    pm_json_state s;
    pm_json_init(&s);
    if (pm_json_feed(&s, text, n)) return 0;
    *done = pm_json_done(&s);
    return 1;
}

static void test_valid_objects(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        size_t n = strlen(valid[i]);
        for (size_t k = 0; k <= n; k++) { /* every prefix, done only at the end */
            int done = -1;
            if (!accepts(valid[i], k, &done)) fail_msg("valid[%zu] refused at byte %zu: %s", i, k, valid[i]);
            assert_int_equal(done, k == n);
        }
        /* fed in pieces: the same state as whole */
        for (size_t cut = 1; cut < n; cut++) {
            pm_json_state s;
            pm_json_init(&s);
            assert_int_equal(pm_json_feed(&s, valid[i], cut), 0);
            assert_int_equal(pm_json_feed(&s, valid[i] + cut, n - cut), 0);
            assert_true(pm_json_done(&s));
        }
    }
}

static void test_invalid_objects(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        int done = 0;
        if (accepts(invalid[i], strlen(invalid[i]), &done) && done) fail_msg("invalid[%zu] accepted: %s", i, invalid[i]);
    }
    /* the limits: nesting and whitespace runs */
    char deep[2 * PM_JSON_MAX_DEPTH + 8];
    size_t n = 0;
    deep[n++] = '{';
    deep[n++] = '"';
    deep[n++] = '"';
    deep[n++] = ':';
    for (int d = 1; d < PM_JSON_MAX_DEPTH; d++) deep[n++] = '[';
    int done;
    assert_true(accepts(deep, n, &done));
    deep[n++] = '[';
    assert_false(accepts(deep, n, &done));
    char ws[PM_JSON_MAX_WS + 3] = "{";
    memset(ws + 1, ' ', PM_JSON_MAX_WS);
    assert_true(accepts(ws, 1 + PM_JSON_MAX_WS, &done));
    ws[1 + PM_JSON_MAX_WS] = '\n';
    assert_false(accepts(ws, 2 + PM_JSON_MAX_WS, &done));
}

/* The mask on the fixture's tokenizer: a token survives iff its bytes continue the text. */
static void test_mask(void **state) {
    (void)state;
    char path[2048];
    snprintf(path, sizeof path, "%s/phi4mm-tiny/tiny_model/tokenizer.json", tu_fixtures());
    pm_tokenizer *tok;
    pm_err e = {0};
    assert_int_equal(pm_tok_load_file(&tok, path, &e), 0);
    int V = pm_tok_vocab_size(tok) + 40; /* ids past the tokenizer's: masked */
    float *lg = malloc(sizeof(float) * (size_t)V);
    uint8_t *allow = malloc((size_t)V);
    pm_json_vocab *jv = pm_json_vocab_new(tok, V);
    assert_non_null(jv);
    const int32_t eos[] = {199999, 200020};
    const char *texts[] = {"",   "{\"name\": \"Ada\", \"age\": 3", "{\"a\": [1, 2", "{\"s\": \"caf\xc3",
                           "{\"s\": \"x\\", "{\"s\": \"x\\u12", "{\"k\": tr", "{\"x\": {}}"};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        pm_json_state s;
        pm_json_init(&s);
        assert_int_equal(pm_json_feed(&s, texts[k], strlen(texts[k])), 0);
        for (int v = 0; v < V; v++) lg[v] = (float)(v % 7);
        pm_json_mask(&s, jv, eos, 2, lg, allow);
        int kept = 0;
        for (int v = 0; v < V; v++) {
            size_t len = 0;
            const char *b = pm_tok_token_bytes(tok, v, &len);
            int want;
            if (v == eos[0] || v == eos[1]) want = pm_json_done(&s);
            else if (pm_json_done(&s) || pm_tok_is_special(tok, v) || !len) want = 0;
            else {
                char buf[4096];
                size_t tl = strlen(texts[k]);
                if (tl + len > sizeof buf) continue;
                memcpy(buf, texts[k], tl);
                memcpy(buf + tl, b, len);
                int done;
                want = accepts(buf, tl + len, &done);
            }
            assert_int_equal(!isinf(lg[v]), want);
            if (want) assert_true(lg[v] == (float)(v % 7)); /* kept tokens keep their logits */
            kept += want;
        }
        assert_true(kept > 0);
        if (k == sizeof texts / sizeof texts[0] - 1) assert_int_equal(kept, 2); /* complete: the end tokens alone */
    }
    free(lg);
    free(allow);
    pm_json_vocab_free(jv);
    pm_tok_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_objects),
        cmocka_unit_test(test_invalid_objects),
        cmocka_unit_test(test_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
