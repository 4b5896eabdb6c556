/* test_regress_config.c — regression inputs found by fuzz/fuzz_config.c.
 *
 * 1. generation_config.json with an integer eos_token_id outside the vocabulary was accepted
 *    (only the list form was range-checked), so a stop id could be negative or never reachable.
 *    The fuzzer's property (every accepted eos id is a token id below vocab_size) failed on an
 *    input of this shape. Fixed in pm_llm_config_parse: the integer form gets the same check.
 * 2. original_max_position_embeddings = 1 (found reviewing the harness's finite-RoPE-scale property)
 *    was accepted: the LongRoPE scale sqrt(1 + ln(max/orig) / ln(orig)) divided by ln(1) = 0 and
 *    became +inf, so every rotated q/k was inf/NaN (the official code raises ZeroDivisionError).
 *    Fixed: the field's lower bound is 2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llm_config.h"
#include "test_util.h"

static const char CRASH_EOS_INT[] = "{\"eos_token_id\": -3}";

static json_t *fixture_config(void) {
    char p[4096];
    snprintf(p, sizeof p, "%s/phi4mm-tiny/tiny_model/config.json", tu_fixtures());
    json_error_t je;
    json_t *c = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!c) fail_msg("%s: %s", p, je.text);
    return c;
}

static void expect_eos_error(json_t *cfg, const char *gen_text) {
    json_error_t je;
    json_t *gen = json_loads(gen_text, 0, &je);
    assert_non_null(gen);
    pm_llm_config c;
    pm_err e = {0};
    assert_int_equal(pm_llm_config_parse(cfg, gen, &c, &e), PM_EFORMAT);
    assert_non_null(strstr(e.msg, "eos_token_id"));
    json_decref(gen);
}

static void test_eos_int_range(void **state) {
    (void)state;
    json_t *cfg = fixture_config();
    expect_eos_error(cfg, CRASH_EOS_INT);
    expect_eos_error(cfg, "{\"eos_token_id\": 200064}");        /* = vocab_size */
    expect_eos_error(cfg, "{\"eos_token_id\": 4294967296000}"); /* would truncate to an int */
    expect_eos_error(cfg, "{\"eos_token_id\": [200020, -1]}");  /* list form (already checked) */
    /* valid forms still load */
    json_error_t je;
    json_t *gen = json_loads("{\"eos_token_id\": 200063}", 0, &je);
    pm_llm_config c;
    pm_err e = {0};
    assert_int_equal(pm_llm_config_parse(cfg, gen, &c, &e), PM_OK);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_ids[0], 200063);
    json_decref(gen);
    json_decref(cfg);
}

static void test_orig_max_pos_one(void **state) {
    (void)state;
    json_t *cfg = fixture_config();
    json_object_set_new(cfg, "original_max_position_embeddings", json_integer(1));
    pm_llm_config c;
    pm_err e = {0};
    assert_int_equal(pm_llm_config_parse(cfg, NULL, &c, &e), PM_EFORMAT);
    assert_non_null(strstr(e.msg, "original_max_position_embeddings"));
    json_object_set_new(cfg, "original_max_position_embeddings", json_integer(2));
    memset(&e, 0, sizeof e);
    assert_int_equal(pm_llm_config_parse(cfg, NULL, &c, &e), PM_OK);
    assert_true(c.rope_scale > 1.0f && c.rope_scale < 1e6f);
    json_decref(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eos_int_range),
        cmocka_unit_test(test_orig_max_pos_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
