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

/* Sampled choices follow the definitions: with temperature T every token at its softmax(x / T)
 * share, with top-p only the smallest set of most likely tokens whose mass reaches p (renormalised),
 * with top-k only the k most likely; empirical shares of 40,000 draws against them. Also over a
 * large vocabulary, where the nucleus is found among the largest few without sorting them all. */
static int by_logit(const void *a, const void *b, void *arg) {
    const float *x = arg;
    int i = *(const int *)a, j = *(const int *)b;
    return x[i] != x[j] ? (x[i] > x[j] ? -1 : 1) : i - j;
}

static void shares(int vocab, const float *x, const pm_sampling *p, double *want) {
    int *order = malloc(sizeof(int) * (size_t)vocab);
    double mx = -INFINITY, total = 0, kept = 0;
    for (int i = 0; i < vocab; i++) {
        order[i] = i;
        if (x[i] > mx) mx = x[i];
    }
    qsort_r(order, (size_t)vocab, sizeof(int), by_logit, (void *)x); /* larger first, then lower index */
    int k = p->top_k > 0 && p->top_k < vocab ? p->top_k : vocab, n = k;
    for (int i = 0; i < k; i++) total += exp((x[order[i]] - mx) / p->temperature);
    if (p->top_p > 0 && p->top_p < 1) {
        double c = 0;
        for (n = 0; n < k && c < p->top_p * total;) c += exp((x[order[n++]] - mx) / p->temperature);
    }
    for (int i = 0; i < vocab; i++) want[i] = 0;
    for (int i = 0; i < n; i++) kept += want[order[i]] = exp((x[order[i]] - mx) / p->temperature);
    for (int i = 0; i < vocab; i++) want[i] /= kept;
    free(order);
}

static void test_sampled_shares(void **state) {
    (void)state;
    const pm_sampling ps[] = {{.temperature = 1.0f, .seed = 3}, {.temperature = 0.7f, .top_p = 0.6f, .seed = 4},
                              {.temperature = 1.3f, .top_k = 4, .seed = 5}, {.temperature = 1.0f, .top_k = 5, .top_p = 0.8f, .seed = 6},
                              {.temperature = 1.0f, .top_p = 0.9f, .seed = 7}}; /* the last: hundreds of tail tokens in the large nucleus */
    for (int big = 0; big < 2; big++) {
        int vocab = big ? 5000 : V, draws = 40000;
        float *x = malloc(sizeof(float) * (size_t)vocab), *y = malloc(sizeof(float) * (size_t)vocab);
        double *want = malloc(sizeof(double) * (size_t)vocab);
        int *got = malloc(sizeof(int) * (size_t)vocab);
        uint32_t seed = 42;
        for (int i = 0; i < vocab; i++) x[i] = (big ? -6.0f : 0.0f) + 4.0f * tu_frand_next(&seed);
        if (big)
            for (int i = 0; i < 6; i++) x[i * 97] = 3.0f + 0.5f * (float)i; /* a few likely tokens over a flat tail */
        for (size_t c = 0; c < sizeof ps / sizeof ps[0]; c++) {
            pm_sampler s;
            assert_int_equal(pm_sampler_init(&s, &ps[c], NULL, 0, vocab), 0);
            memset(got, 0, sizeof(int) * (size_t)vocab);
            for (int d = 0; d < draws; d++) {
                memcpy(y, x, sizeof(float) * (size_t)vocab);
                int t = pm_sampler_next(&s, y);
                assert_true(t >= 0 && t < vocab);
                got[t]++;
            }
            pm_sampler_free(&s);
            shares(vocab, x, &ps[c], want);
            for (int i = 0; i < vocab; i++) {
                if (want[i] == 0) assert_int_equal(got[i], 0); /* outside the nucleus or the top k: never */
                else assert_true(fabs((double)got[i] / draws - want[i]) < 0.012);
            }
        }
        free(x); free(y); free(want); free(got);
    }
}

/* min-p keeps the tokens at least min_p times as likely as the most likely one, on each of the
 * sampler's paths (all tokens, the nucleus of all, top-k), and draws among them by their shares:
 * here 1 : 0.5 : 0.25 (the last under min_p 0.3), the rest far below. */
static void test_min_p(void **state) {
    (void)state;
    float x[V], y[V];
    for (int v = 0; v < V; v++) x[v] = -30.0f;
    x[7] = 2.0f, x[3] = 2.0f + logf(0.5f), x[9] = 2.0f + logf(0.25f);
    const struct { int top_k; float top_p; } paths[] = {{0, 1.0f}, {0, 0.999f}, {6, 1.0f}};
    for (int k = 0; k < 3; k++) {
        pm_sampling p = {.temperature = 1.0f, .seed = 11, .top_k = paths[k].top_k, .top_p = paths[k].top_p, .min_p = 0.3f};
        pm_sampler s;
        assert_int_equal(pm_sampler_init(&s, &p, NULL, 0, V), PM_OK);
        int hits[V] = {0}, n = 6000;
        for (int i = 0; i < n; i++) {
            memcpy(y, x, sizeof x);
            hits[pm_sampler_next(&s, y)]++;
        }
        pm_sampler_free(&s);
        assert_int_equal(hits[7] + hits[3], n); /* token 9 (0.25 of the top) and the rest never */
        double share = (double)hits[3] / n;   /* 0.5 / 1.5 */
        assert_true(share > 0.30 && share < 0.37);
    }
    /* min_p 1: only the most likely; 0: off (token 9 comes) */
    for (int k = 0; k < 2; k++) {
        pm_sampling p = {.temperature = 1.0f, .seed = 5, .min_p = k ? 1.0f : 0.0f};
        pm_sampler s;
        assert_int_equal(pm_sampler_init(&s, &p, NULL, 0, V), PM_OK);
        int nine = 0, seven = 0;
        for (int i = 0; i < 2000; i++) {
            memcpy(y, x, sizeof x);
            int c = pm_sampler_next(&s, y);
            nine += c == 9, seven += c == 7;
        }
        pm_sampler_free(&s);
        if (k) assert_int_equal(seven, 2000);
        else assert_true(nine > 100);
    }
}

/* pm_top_k's and pm_rank's ranks against their definition (1 + how many are larger), with ties:
 * tokens as likely share a rank, the next one skips past them, as vLLM counts. */
static void test_ranks(void **state) {
    (void)state;
    float x[V] = {1, 3, 3, 0.5f, 2, 3, -1, 2, 0, 0.5f, 4, -2};
    pm_logprob top[PM_MAX_TOP_LOGPROBS];
    int n = pm_top_k(x, V, 6, top);
    assert_int_equal(n, 6);
    const int32_t want_tok[6] = {10, 1, 2, 5, 4, 7}, want_rank[6] = {1, 2, 2, 2, 5, 5};
    for (int q = 0; q < n; q++) {
        assert_int_equal(top[q].token, want_tok[q]);
        assert_int_equal(top[q].rank, want_rank[q]);
    }
    for (int t = 0; t < V; t++) {
        int32_t r = 1;
        for (int i = 0; i < V; i++) r += x[i] > x[t];
        assert_int_equal(pm_rank(x, V, t), r);
    }
    assert_int_equal(pm_rank(x, V, 11), V);
}

/* KL(P || Q) against values worked by hand: P = (1/2, 1/2), Q = (0.9, 0.1) given as logits
 * shifted by 3 (log-softmax takes the shift out): 1/2 ln(5/9) + 1/2 ln 5 = 0.510826 nats (the
 * other direction, KL(Q || P), is 0.368064); P with a zero entry adds nothing for it; equal
 * distributions give 0 and never less. */
static void test_kl_divergence(void **state) {
    (void)state;
    float q[2] = {logf(0.9f) + 3, logf(0.1f) + 3}, p[2] = {0, 0}, lp[2], lq[2];
    pm_log_softmax(p, 2, lp);
    assert_true(fabsf(lp[0] - logf(0.5f)) < 1e-6f && fabsf(lp[1] - logf(0.5f)) < 1e-6f);
    assert_true(fabs(pm_kl_divergence(lp, q, 2) - 0.510826) < 1e-5);
    pm_log_softmax(q, 2, lq);
    assert_true(fabs(pm_kl_divergence(lq, p, 2) - 0.368064) < 1e-5);
    float one[3] = {0, -INFINITY, -INFINITY}, x3[3] = {1, 2, 3}; /* P = (1, 0, 0): -log Q_0 */
    assert_true(fabs(pm_kl_divergence(one, x3, 3) - (log(exp(1.0) + exp(2.0) + exp(3.0)) - 1)) < 1e-5);
    float l3[3];
    pm_log_softmax(x3, 3, l3);
    assert_true(pm_kl_divergence(l3, x3, 3) >= 0 && pm_kl_divergence(l3, x3, 3) < 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_penalize_matches_definition),
        cmocka_unit_test(test_penalize_many_tokens),
        cmocka_unit_test(test_off_changes_nothing),
        cmocka_unit_test(test_choices_follow_the_biases),
        cmocka_unit_test(test_sampled_shares),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_ranks),
        cmocka_unit_test(test_kl_divergence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
