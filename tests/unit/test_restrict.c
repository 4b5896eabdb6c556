/* test_restrict.c — allowed_token_ids and bad_words (src/engine/restrict.h) with the fixture's real
 * Phi-4 tokenizer: the checks name what is wrong; each bad word becomes its two spellings' token
 * sequences as the tokenizer writes them; a sequence's last token is lowered exactly where the
 * answer ends with the rest of it (a one-token word always); the allowed set keeps its tokens'
 * logits, repeats and order aside, and lowers every other. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/restrict.h"
#include "test_util.h"

enum { V = 200064 };

static void test_check(void **state) {
    (void)state;
    pm_err e = {0};
    int32_t ids[] = {5, V};
    const char *words[] = {"fine", "   ", ""};
    pm_request r = {0};
    assert_int_equal(pm_restrict_check(&r, V, &e), PM_OK);
    r.allowed_ids = ids;
    r.n_allowed_ids = 1;
    assert_int_equal(pm_restrict_check(&r, V, &e), PM_OK);
    r.n_allowed_ids = 2;
    e = (pm_err){0};
    assert_int_equal(pm_restrict_check(&r, V, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "allowed token id 200064 (entry 1)"));
    r.n_allowed_ids = 0;
    r.bad_words = words;
    r.n_bad_words = 1;
    assert_int_equal(pm_restrict_check(&r, V, &e), PM_OK);
    for (int k = 1; k < 3; k++) {
        r.bad_words = words + k;
        e = (pm_err){0}; /* an error keeps its first message */
        assert_int_equal(pm_restrict_check(&r, V, &e), PM_EINVAL);
        assert_non_null(strstr(e.msg, "bad word 0"));
    }
    r.n_bad_words = PM_MAX_BAD_WORDS + 1;
    assert_int_equal(pm_restrict_check(&r, V, &e), PM_EINVAL);
}

/* The sequence k of r as a fresh array's length and ids. */
static int seq(const pm_restrict *r, int k, const int32_t **ids) {
    int b0 = k ? r->bad_end[k - 1] : 0;
    *ids = r->bad + b0;
    return r->bad_end[k] - b0;
}

static void test_bad_words(void **state) {
    (void)state;
    pm_tokenizer *tok = tu_fixture_tokenizer();
    assert_non_null(tok);
    pm_err e = {0};
    const char *words[] = {"Domino", "  hello world"};
    pm_request req = {.bad_words = words, .n_bad_words = 2};
    pm_restrict r;
    assert_int_equal(pm_restrict_init(&r, tok, &req, &e), PM_OK);
    /* the two spellings of each, as the tokenizer writes them (a spelling equal to the other once) */
    const char *texts[] = {"Domino", " Domino", "hello world", " hello world"};
    int k = 0;
    for (int t = 0; t < 4; t++) {
        int32_t *want = NULL;
        size_t n = 0;
        assert_int_equal(pm_tok_encode(tok, texts[t], strlen(texts[t]), 1, &want, &n, &e), PM_OK);
        const int32_t *got;
        assert_true(k < r.n_bad);
        assert_int_equal(seq(&r, k, &got), (int)n);
        assert_memory_equal(got, want, sizeof(int32_t) * n);
        k++;
        free(want);
    }
    assert_int_equal(r.n_bad, 4);
    /* the last token lowered exactly after the rest; a one-token sequence always */
    float *lg = malloc(sizeof(float) * V);
    for (int s = 0; s < r.n_bad; s++) {
        const int32_t *w;
        int len = seq(&r, s, &w);
        int32_t out[8] = {42, 43};
        int n_out = 2;
        for (int i = 0; i + 1 < len; i++) out[n_out++] = w[i];
        for (int v = 0; v < V; v++) lg[v] = (float)(v % 7);
        pm_restrict_apply(&r, out, n_out, lg, V);
        assert_true(isinf(lg[w[len - 1]]) && lg[w[len - 1]] < 0);
        if (len > 1) { /* without the rest before it, it may come (unless another sequence bans it alone) */
            int alone = 0;
            for (int o = 0; o < r.n_bad; o++) {
                const int32_t *x;
                alone |= seq(&r, o, &x) == 1 && x[0] == w[len - 1];
            }
            out[n_out - 1] ^= 1;
            for (int v = 0; v < V; v++) lg[v] = 1.0f;
            pm_restrict_apply(&r, out, n_out, lg, V);
            assert_true(alone || lg[w[len - 1]] == 1.0f);
        }
    }
    pm_restrict_free(&r);
    free(lg);
    pm_tok_free(tok);
}

static void test_allowed(void **state) {
    (void)state;
    pm_err e = {0};
    int32_t ids[] = {9, 3, 9, 200063, 3};
    pm_request req = {.allowed_ids = ids, .n_allowed_ids = 5};
    pm_restrict r;
    assert_int_equal(pm_restrict_init(&r, NULL, &req, &e), PM_OK);
    assert_int_equal(r.n_allowed, 3);
    float *lg = malloc(sizeof(float) * V);
    for (int v = 0; v < V; v++) lg[v] = (float)v * 0.5f;
    pm_restrict_apply(&r, NULL, 0, lg, V);
    for (int v = 0; v < V; v++) {
        int keep = v == 3 || v == 9 || v == 200063;
        if (keep) assert_true(lg[v] == (float)v * 0.5f);
        else assert_true(isinf(lg[v]) && lg[v] < 0);
    }
    pm_restrict_free(&r);
    free(lg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_bad_words),
        cmocka_unit_test(test_allowed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
