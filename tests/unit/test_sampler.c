/* test_sampler.c — logit biases and penalties against their definitions written out here
 * (OpenAI's frequency/presence penalties on the output's tokens, Hugging Face's repetition
 * penalty on the prompt's and the output's, biases added first), greedy and sampled choices under
 * them, and that everything off leaves the logits alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "test_util.h"

enum { V = 12 };

static void fill(float *x, uint32_t seed) {
    for (int i = 0; i < V; i++) x[i] = 4.0f * tu_frand_next(&seed);
}

/* The definitions: biases summed in, then for every token of prompt or output the repetition
 * penalty by the logit's sign, then count x frequency + presence for the output's tokens. */
static void reference(float *x, const pm_sampling *p, const pm_logit_bias *b, int nb, const int32_t *prompt, int np, const int32_t *out,
                      int no) {
    int count[V] = {0}, in_prompt[V] = {0};
    for (int i = 0; i < nb; i++) x[b[i].token] += b[i].bias;
    for (int i = 0; i < np; i++) in_prompt[prompt[i]] = 1;
    for (int i = 0; i < no; i++) count[out[i]]++;
    for (int v = 0; v < V; v++) {
        if (!in_prompt[v] && !count[v]) continue;
        if (p->repetition_penalty > 0) x[v] = x[v] > 0 ? x[v] / p->repetition_penalty : x[v] * p->repetition_penalty;
        if (count[v]) x[v] -= (float)count[v] * p->frequency_penalty + p->presence_penalty;
    }
}

static void test_penalize_matches_definition(void **state) {
    (void)state;
    const int32_t prompt[] = {1, 2, 2, 5, 11};
    const int32_t out[] = {2, 3, 3, 3, 7, 0};
    const pm_logit_bias bias[] = {{3, 1.0f}, {9, -2.0f}, {9, 0.5f}, {0, -0.25f}};
    pm_sampling p = {.frequency_penalty = 0.4f, .presence_penalty = 0.3f, .repetition_penalty = 1.5f};
    for (uint32_t seed = 1; seed < 40; seed++) {
        float x[V], want[V];
        fill(x, seed);
        for (int i = 0; i < V; i++) x[i] -= 2.0f; /* both signs */
        memcpy(want, x, sizeof x);
        pm_sampler s;
        assert_int_equal(pm_sampler_init(&s, &p, bias, 4, V), PM_OK);
        assert_true(pm_sampler_modifies(&s));
        pm_sampler_prompt(&s, prompt, 5);
        for (int i = 0; i < 6; i++) pm_sampler_accept(&s, out[i]);
        pm_sampler_penalize(&s, x);
        reference(want, &p, bias, 4, prompt, 5, out, 6);
        for (int i = 0; i < V; i++) assert_float_equal(x[i], want[i], 1e-6);
        pm_sampler_free(&s);
    }
    /* frequency and presence only: the prompt's tokens keep their logits */
    pm_sampling q = {.frequency_penalty = 1.0f, .presence_penalty = 0.5f};
    float x[V], want[V];
    fill(x, 7);
    memcpy(want, x, sizeof x);
    pm_sampler s;
    assert_int_equal(pm_sampler_init(&s, &q, NULL, 0, V), PM_OK);
    pm_sampler_prompt(&s, prompt, 5);
    pm_sampler_accept(&s, 3);
    pm_sampler_accept(&s, 3);
    pm_sampler_penalize(&s, x);
    for (int i = 0; i < V; i++) assert_float_equal(x[i], i == 3 ? want[i] - 2.5f : want[i], 1e-6);
    pm_sampler_free(&s);
}

/* A long prompt and output over a large vocabulary (the sampler's table grows several times). */
static void test_penalize_many_tokens(void **state) {
    (void)state;
    enum { BV = 50000, NP = 3000, NO = 700 };
    int32_t *prompt = malloc(sizeof(int32_t) * NP), *out = malloc(sizeof(int32_t) * NO);
    int *count = calloc(BV, sizeof(int)), *seen = calloc(BV, sizeof(int));
    float *x = malloc(sizeof(float) * BV), *want = malloc(sizeof(float) * BV);
    uint32_t r = 77;
    for (int i = 0; i < NP; i++) prompt[i] = (int32_t)((tu_frand_next(&r) + 1.0f) * 0.5f * (BV - 1));
    for (int i = 0; i < NO; i++) out[i] = i % 3 ? prompt[i] : (int32_t)((tu_frand_next(&r) + 1.0f) * 0.5f * (BV - 1));
    for (int i = 0; i < BV; i++) x[i] = want[i] = 3.0f * tu_frand_next(&r);
    pm_sampling p = {.frequency_penalty = 0.25f, .presence_penalty = -0.5f, .repetition_penalty = 1.7f};
    pm_sampler s;
    assert_int_equal(pm_sampler_init(&s, &p, NULL, 0, BV), PM_OK);
    assert_int_equal(pm_sampler_prompt(&s, prompt, NP), PM_OK);
    for (int i = 0; i < NO; i++) assert_int_equal(pm_sampler_accept(&s, out[i]), PM_OK);
    pm_sampler_penalize(&s, x);
    for (int i = 0; i < NP; i++) seen[prompt[i]] = 1;
    for (int i = 0; i < NO; i++) seen[out[i]] = 1, count[out[i]]++;
    for (int v = 0; v < BV; v++) {
        if (seen[v]) want[v] = want[v] > 0 ? want[v] / 1.7f : want[v] * 1.7f;
        if (count[v]) want[v] -= (float)count[v] * 0.25f - 0.5f;
        assert_float_equal(x[v], want[v], 1e-6);
    }
    pm_sampler_free(&s);
    free(prompt);
    free(out);
    free(count);
    free(seen);
    free(x);
    free(want);
}

static void test_off_changes_nothing(void **state) {
    (void)state;
    const pm_sampling offs[] = {{0}, {.repetition_penalty = 1.0f}, {.top_k = 3, .top_p = 0.5f}};
    for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++) {
        float x[V], y[V];
        fill(x, 99);
        memcpy(y, x, sizeof x);
        pm_sampler s;
        assert_int_equal(pm_sampler_init(&s, &offs[k], NULL, 0, V), PM_OK);
        assert_false(pm_sampler_modifies(&s)); /* greedy: the logits are read, not changed */
        const int32_t ids[] = {1, 2};
        pm_sampler_prompt(&s, ids, 2);
        pm_sampler_accept(&s, 4);
        assert_int_equal(pm_sampler_next(&s, x), pm_argmax(y, V));
        assert_memory_equal(x, y, sizeof x);
        pm_sampler_free(&s);
    }
}

static void test_choices_follow_the_biases(void **state) {
    (void)state;
    float x[V];
    fill(x, 5);
    int top = pm_argmax(x, V), other = (top + 1) % V;
    /* greedy: a bias decides, a penalty moves the choice off a repeated token */
    pm_logit_bias up = {other, 100.0f}, ban = {top, -100.0f};
    pm_sampling g = {0};
    pm_sampler s;
    float y[V];
    assert_int_equal(pm_sampler_init(&s, &g, &up, 1, V), PM_OK);
    memcpy(y, x, sizeof x);
    assert_int_equal(pm_sampler_next(&s, y), other);
    pm_sampler_free(&s);
    g.presence_penalty = 1e4f;
    assert_int_equal(pm_sampler_init(&s, &g, NULL, 0, V), PM_OK);
    pm_sampler_accept(&s, top);
    memcpy(y, x, sizeof x);
    assert_int_not_equal(pm_sampler_next(&s, y), top);
    pm_sampler_free(&s);
    /* sampled: a banned token never comes, a forced one always */
    pm_sampling t = {.temperature = 1.0f, .seed = 3};
    for (int which = 0; which < 2; which++) {
        assert_int_equal(pm_sampler_init(&s, &t, which ? &up : &ban, 1, V), PM_OK);
        int hits = 0;
        for (int i = 0; i < 2000; i++) {
            memcpy(y, x, sizeof x);
            int c = pm_sampler_next(&s, y);
            hits += which ? c == other : c == top;
        }
        assert_int_equal(hits, which ? 2000 : 0);
        pm_sampler_free(&s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_penalize_matches_definition),
        cmocka_unit_test(test_penalize_many_tokens),
        cmocka_unit_test(test_off_changes_nothing),
        cmocka_unit_test(test_choices_follow_the_biases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
