/* test_regress_tok_encode.c — regression inputs found by fuzz/fuzz_tok_encode.c.
 *
 * 1. Decoding ids that produce no bytes at all (an empty id list, or only unknown / skipped ids)
 *    handed a NULL buffer with length 0 to pm_utf8_lossy, which computed NULL + 0: undefined
 *    behaviour, reported by UBSan ("applying zero offset to null pointer", src/tok/utf8.c). The
 *    fuzzer's input was the 4 bytes below (mode 3 = decode ids; 3 payload bytes = no whole id).
 *    Fixed in pm_utf8_lossy. This test has teeth under `make test-asan` (UBSan aborts). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer.h"
#include "tok/utf8.h"
#include "test_util.h"

static const uint8_t CRASH_DECODE_EMPTY[] = {0xc3, 0x19, 0x01, 0x3c};

static pm_tokenizer *tok;

static int setup(void **state) {
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/phi4mm-tiny/tiny_model", tu_fixtures());
    pm_err e = {0};
    if (pm_tok_load(&tok, dir, &e)) {
        fprintf(stderr, "fixture tokenizer: %s\n", e.msg);
        return -1; /* the group fails: a missing fixture is a failure, not a skip */
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pm_tok_free(tok);
    return 0;
}

static void test_lossy_null_empty(void **state) {
    (void)state;
    pm_buf b = {0};
    pm_err e = {0};
    assert_int_equal(pm_utf8_lossy(NULL, 0, 1, &b, NULL, &e), PM_OK);
    size_t held = 7;
    assert_int_equal(pm_utf8_lossy(NULL, 0, 0, &b, &held, &e), PM_OK);
    assert_int_equal(held, 0);
    char *s = NULL;
    size_t n = 9;
    assert_int_equal(pm_buf_take(&b, &s, &n, &e), PM_OK);
    assert_non_null(s);
    assert_int_equal(n, 0);
    assert_string_equal(s, "");
    free(s);
}

static void test_decode_no_bytes(void **state) {
    (void)state;
    /* the fuzzer's input as the harness reads it: mode 3, k = 3 / 4 = 0 ids */
    assert_int_equal(CRASH_DECODE_EMPTY[0] & 7, 3);
    size_t k = (sizeof CRASH_DECODE_EMPTY - 1) / 4;
    int32_t none[1] = {0};
    pm_err e = {0};
    char *out = NULL;
    size_t ol = 5;
    assert_int_equal(pm_tok_decode(tok, none, k, 0, &out, &ol, &e), PM_OK);
    assert_string_equal(out, "");
    assert_int_equal(ol, 0);
    free(out);
    /* ids that decode to nothing: negative, out of range, and a special token with skip_special */
    int32_t unknown[] = {-5, 300000, 199999};
    assert_int_equal(pm_tok_decode(tok, unknown, 3, 1, &out, &ol, &e), PM_OK);
    assert_string_equal(out, "");
    free(out);
    /* the streaming decoder on the same ids */
    pm_tok_stream *st = pm_tok_stream_new(tok, 1);
    assert_non_null(st);
    for (int i = 0; i < 3; i++) {
        char *t = NULL;
        size_t tl = 1;
        assert_int_equal(pm_tok_stream_push(st, unknown[i], &t, &tl, &e), PM_OK);
        assert_string_equal(t, "");
        free(t);
    }
    char *t = NULL;
    assert_int_equal(pm_tok_stream_flush(st, &t, NULL, &e), PM_OK);
    assert_string_equal(t, "");
    free(t);
    pm_tok_stream_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lossy_null_empty),
        cmocka_unit_test(test_decode_no_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
