/* test_engine.c — sequence-level guarantees of the engine on the tiny fixture model:
 *  - LongRoPE is per sequence: a sequence crossing original_max_position recomputes its cache with
 *    the long factors while a short sequence in the same batch gets exactly its solo logits;
 *  - adapter isolation: a speech-adapter sequence and a no-adapter sequence batched together each
 *    equal their solo runs bit for bit, and the speech one really differs without its adapter;
 *  - the official adapter policy by mode; cancellation frees the sequence; bad requests are refused;
 *  - the KV budget: refused, deferred and admitted requests, reservations back to 0;
 *  - a request encoded and prefilled on another thread while the live sequences step
 *    (pm_engine_encode + pm_engine_prefill, as the server does) gives every sequence its solo
 *    logits, bit for bit, whatever the thread counts;
 *  - the LongRoPE recompute taken out of the steps (opts.recompute_beside, as the server runs it):
 *    the other sequence decodes meanwhile, the tokens and logits are those of the inline recompute;
 *    cancelled or failed while away, the sequence ends once and nothing stays reserved;
 *  - the encoders' stop hook (pm_request.should_stop) ends an encode with PM_ECANCELED;
 *  - prompt log-probabilities agree with the generated tokens' (teacher forcing), whatever the chunks;
 *  - logit biases and penalties apply their definitions to the model's logits (teacher forcing);
 *  - JSON mode keeps the output a prefix of an object and ends it with the end token;
 *  - min_tokens and ignore_eos hold the end token back;
 *  - stop tokens end a request, what ended it kept in the text when asked, special tokens' text when asked;
 *  - the prompt cache starts a prompt past an ended one's whole chunks with the same bits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/grammar.h"
#include "engine/json_mode.h"
#include "engine/kv_budget.h"
#include "engine/regex.h"
#include "engine/sampler.h"
#include "engine/model.h"
#include "nn/kernels.h"
#include "phi4mm.h"
#include "test_util.h"
#include "tok/chat.h"
#include "tok/tokenizer.h"

#define STEPS 6
typedef struct fx {
    pm_model *m;
    pm_audio_in clip;
} fx;

static int setup(void **state) {
    static fx f;
    char p[2048], err[1024];
    snprintf(p, sizeof p, "%s/phi4mm-tiny/tiny_model", tu_fixtures());
    if (pm_model_load(&f.m, p, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    snprintf(p, sizeof p, "%s/phi4mm-tiny/inputs/clip_a_16k.wav", tu_fixtures());
    FILE *fp = fopen(p, "rb");
    if (!fp) return -1;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    if (pm_audio_decode(buf, n, p, &f.clip, err, sizeof err)) return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state) {
    fx *f = *state;
    pm_audio_in_free(&f->clip);
    pm_model_free(f->m);
    return 0;
}

typedef struct run {
    int n_req;
    pm_request req[2];
    int64_t id[2];
    float *logits[2];     /* [STEPS][vocab] */
    int rope_long[2][STEPS];
    int tokens[2];
    int cached[2];        /* on_prompt_cached: the positions the prompt cache held (-1: not called) */
} run;

static int32_t *text_ids(int n, uint32_t seed) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = (int32_t)(1000 + (seed >> 8) % 150000u);
    }
    return ids;
}

typedef struct rec {
    pm_engine *eng;
    run *r;
    int i, step;
} rec;

static void rec_cached(void *u, int positions) {
    rec *c = u;
    c->r->cached[c->i] = positions;
}

/* on_token: the sequence has just sampled; copy the logits it sampled from. */
static int rec_token(void *u, int32_t tok, const char *text, size_t len) {
    (void)tok; (void)text; (void)len;
    rec *c = u;
    int rl = 0;
    const float *lg = pm_engine_last_logits(c->eng, c->r->id[c->i], &rl, NULL);
    if (lg && c->step < STEPS) {
        int V = 200064;
        memcpy(c->r->logits[c->i] + (size_t)c->step * V, lg, sizeof(float) * (size_t)V);
        c->r->rope_long[c->i][c->step] = rl;
        c->step++;
    }
    return 0;
}

/* Runs the requests of r (indices in `which`) in one engine, recording each step's logits. */
static void execute_with(fx *f, run *r, const int *which, int nw, const pm_engine_opts *o) {
    pm_engine *eng;
    char err[512];
    assert_int_equal(f->m->llm.c.vocab, 200064);
    assert_int_equal(pm_engine_new(&eng, f->m, o, err, sizeof err), 0);
    rec c[2];
    for (int k = 0; k < nw; k++) {
        int i = which[k];
        c[k] = (rec){eng, r, i, 0};
        pm_callbacks cb = {.on_token = rec_token, .user = &c[k]};
        assert_int_equal(pm_engine_submit(eng, &r->req[i], &cb, &r->id[i], err, sizeof err), 0);
    }
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    pm_engine_free(eng);
}

static void execute(fx *f, run *r, const int *which, int nw) { execute_with(f, r, which, nw, NULL); }

static void test_longrope_per_sequence_in_batch(void **state) {
    fx *f = *state;
    int V = f->m->llm.c.vocab, L0 = f->m->llm.c.orig_max_pos;
    run solo = {0}, bat = {0};
    int32_t *a = text_ids(L0 - 2, 7), *b = text_ids(20, 9);
    for (run *r = &solo; r; r = r == &solo ? &bat : NULL) {
        r->req[0].ids = a;
        r->req[0].n_ids = (size_t)(L0 - 2);
        r->req[0].max_tokens = STEPS; /* token L0-2+2 = L0: the third decode crosses */
        r->req[1].ids = b;
        r->req[1].n_ids = 20;
        r->req[1].max_tokens = STEPS;
        for (int i = 0; i < 2; i++) r->logits[i] = calloc((size_t)STEPS * V, sizeof(float));
    }
    execute(f, &solo, (int[]){0}, 1);
    execute(f, &solo, (int[]){1}, 1);
    execute(f, &bat, (int[]){0, 1}, 2);
    /* the long sequence switched, the short one never did */
    int switched = 0;
    for (int s = 0; s < STEPS; s++) {
        switched |= bat.rope_long[0][s];
        assert_int_equal(bat.rope_long[1][s], 0);
    }
    assert_true(switched);
    for (int i = 0; i < 2; i++) assert_memory_equal(solo.logits[i], bat.logits[i], sizeof(float) * (size_t)STEPS * V);
    for (int i = 0; i < 2; i++) { free(solo.logits[i]); free(bat.logits[i]); }
    free(a);
    free(b);
}

/* r->req[0]: the audio case (speech adapter), r->req[1]: a text question; STEPS logits each. */
static void audio_and_text(fx *f, run *r) {
    r->req[0].prompt = "<|user|><|audio_1|>Transcribe the audio clip into text.<|end|><|assistant|>";
    r->req[0].audios = &f->clip;
    r->req[0].n_audios = 1;
    r->req[0].max_tokens = STEPS;
    r->req[1].prompt = "<|user|>What is the capital of France?<|end|><|assistant|>";
    r->req[1].max_tokens = STEPS;
    for (int i = 0; i < 2; i++) r->logits[i] = calloc((size_t)STEPS * f->m->llm.c.vocab, sizeof(float));
}

static void test_adapter_isolation_in_batch(void **state) {
    fx *f = *state;
    int V = f->m->llm.c.vocab;
    run solo = {0}, bat = {0}, noad = {0};
    for (run *r = &solo; r; r = r == &solo ? &bat : r == &bat ? &noad : NULL) audio_and_text(f, r);
    execute(f, &solo, (int[]){0}, 1);
    execute(f, &solo, (int[]){1}, 1);
    execute(f, &bat, (int[]){0, 1}, 2);
    for (int i = 0; i < 2; i++) assert_memory_equal(solo.logits[i], bat.logits[i], sizeof(float) * (size_t)STEPS * V);
    /* without its adapter the audio request's logits change: the check above has teeth */
    noad.req[0].prompt = "<|user|><|audio_1|>Transcribe the audio clip into text.<|end|><|assistant|>";
    execute(f, &noad, (int[]){0}, 1);
    for (int i = 0; i < 2; i++) { free(solo.logits[i]); free(bat.logits[i]); free(noad.logits[i]); }
}

/* Log-probabilities (pm_request.logprobs): each generated token's comes right before its
 * on_token, from the very logits it was sampled from: log-softmax in double, the top ones the
 * largest logits in order, the greedy choice the first of them; with temperature the model's
 * logits, not the rescaled ones, and the same draws as without log-probabilities. */
typedef struct lp_rec {
    pm_engine *eng;
    int64_t id;
    int n_lp, n_tok, order_ok, checked;
    int32_t tokens[STEPS + 1];
    pm_logprob chosen[STEPS + 1], top[STEPS + 1][5];
    int n_top[STEPS + 1];
    double max_err;
    int top_ok;
} lp_rec;

static void lp_on_logprobs(void *u, pm_logprob chosen, const pm_logprob *top, int n_top) {
    lp_rec *c = u;
    if (c->n_lp != c->n_tok || c->n_lp > STEPS) { c->order_ok = 0; return; }
    c->chosen[c->n_lp] = chosen;
    c->n_top[c->n_lp] = n_top;
    memcpy(c->top[c->n_lp], top, sizeof(pm_logprob) * (size_t)(n_top < 5 ? n_top : 5));
    c->n_lp++;
}

static int lp_on_token(void *u, int32_t tok, const char *text, size_t len) {
    (void)text; (void)len;
    lp_rec *c = u;
    if (c->n_tok >= STEPS + 1) return 0;
    if (c->n_lp != c->n_tok + 1 || c->chosen[c->n_tok].token != tok) c->order_ok = 0;
    c->tokens[c->n_tok] = tok;
    const float *lg = pm_engine_last_logits(c->eng, c->id, NULL, NULL);
    if (lg && c->n_lp == c->n_tok + 1) { /* greedy: the logits it sampled from are the model's */
        int V = 200064;
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
        for (int i = 0; i < V; i++) s += exp((double)lg[i] - mx);
        double lse = mx + log(s), err = fabs(c->chosen[c->n_tok].logprob - (lg[tok] - lse));
        for (int k = 0; k < c->n_top[c->n_tok]; k++) {
            const pm_logprob *t = &c->top[c->n_tok][k];
            double ek = fabs(t->logprob - (lg[t->token] - lse));
            if (ek > err) err = ek;
            int above = 0; /* how many logits rank before t: larger, or equal with a lower id */
            for (int i = 0; i < V; i++) above += lg[i] > lg[t->token] || (lg[i] == lg[t->token] && i < t->token);
            if (above != k) c->top_ok = 0;
        }
        if (err > c->max_err) c->max_err = err;
        c->checked++;
    }
    c->n_tok++;
    return 0;
}

static void run_lp(fx *f, const pm_request *r, lp_rec *c) {
    pm_engine *eng;
    char err[512];
    assert_int_equal(pm_engine_new(&eng, f->m, NULL, err, sizeof err), 0);
    memset(c, 0, sizeof *c);
    c->eng = eng;
    c->order_ok = c->top_ok = 1;
    pm_callbacks cb = {.on_token = lp_on_token, .user = c, .on_logprobs = lp_on_logprobs};
    assert_int_equal(pm_engine_submit(eng, r, &cb, &c->id, err, sizeof err), 0);
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    pm_engine_free(eng);
}

/* A request the engine refuses at submit with PM_EINVAL and a message holding needle. */
static void submit_refused(fx *f, const pm_request *r, const char *needle) {
    pm_engine *eng;
    char err[512];
    int64_t id;
    assert_int_equal(pm_engine_new(&eng, f->m, NULL, err, sizeof err), 0);
    pm_callbacks cb = {0};
    assert_int_equal(pm_engine_submit(eng, r, &cb, &id, err, sizeof err), PM_EINVAL);
    if (!strstr(err, needle)) fail_msg("'%s' lacks '%s'", err, needle);
    assert_int_equal(pm_engine_live(eng), 0);
    pm_engine_free(eng);
}

static void test_logprobs(void **state) {
    fx *f = *state;
    pm_request r = {0};
    r.prompt = "<|user|><|audio_1|>Transcribe the audio clip into text.<|end|><|assistant|>";
    r.audios = &f->clip;
    r.n_audios = 1;
    r.max_tokens = STEPS;
    r.logprobs = 1;
    r.top_logprobs = 5;
    lp_rec g;
    run_lp(f, &r, &g);
    assert_int_equal(g.n_tok, STEPS);
    assert_int_equal(g.n_lp, STEPS);
    assert_true(g.order_ok);
    assert_int_equal(g.checked, STEPS);
    assert_true(g.top_ok);
    assert_true(g.max_err < 1e-5);
    for (int k = 0; k < STEPS; k++) {
        assert_int_equal(g.n_top[k], 5);
        assert_int_equal(g.top[k][0].token, g.chosen[k].token); /* greedy */
        assert_true(g.chosen[k].logprob <= 0);
        double mass = 0;
        for (int j = 0; j < 5; j++) mass += exp(g.top[k][j].logprob);
        assert_true(mass <= 1.0 + 1e-5);
    }
    /* sampling: the draws do not change, the log-probabilities are the model's (top[0] the largest) */
    r.sampling.temperature = 1.3f;
    r.sampling.seed = 11;
    lp_rec a, b;
    run_lp(f, &r, &a);
    r.logprobs = 0;
    r.top_logprobs = 0;
    run_lp(f, &r, &b);
    assert_int_equal(a.n_tok, b.n_tok);
    assert_memory_equal(a.tokens, b.tokens, sizeof(int32_t) * (size_t)a.n_tok);
    assert_int_equal(b.n_lp, 0);
    assert_true(a.order_ok && a.n_lp == a.n_tok);
    for (int k = 0; k < a.n_lp; k++) assert_true(a.chosen[k].logprob <= a.top[k][0].logprob);
    assert_memory_equal(a.top[0], g.top[0], sizeof g.top[0]); /* the first step's logits are the same: not rescaled by 1/T */
    /* only logprobs: the chosen token's alone */
    r.logprobs = 1;
    r.sampling.temperature = 0;
    run_lp(f, &r, &a);
    assert_true(a.n_lp == STEPS && a.n_top[0] == 0 && a.order_ok);
    assert_true(fabs(a.chosen[0].logprob - g.chosen[0].logprob) < 1e-6);
    /* the end-of-sequence token reports its entry only with logprobs_eos: make the first greedy
     * token an end token of the model for a moment */
    pm_llm_config *cfg = &f->m->llm.c;
    int n_eos = cfg->n_eos, eos0 = cfg->eos_ids[0];
    cfg->eos_ids[0] = g.tokens[0];
    cfg->n_eos = 1;
    r.sampling.temperature = 0;
    r.top_logprobs = 2;
    run_lp(f, &r, &a);
    assert_true(a.n_tok <= 1 && a.n_lp == 0);
    r.logprobs_eos = 1;
    run_lp(f, &r, &a);
    assert_true(a.n_tok <= 1 && a.n_lp == 1 && a.order_ok && a.chosen[0].token == g.tokens[0] && a.n_top[0] == 2);
    assert_true(fabs(a.chosen[0].logprob - g.chosen[0].logprob) < 1e-6);
    cfg->eos_ids[0] = eos0;
    cfg->n_eos = n_eos;
    r.logprobs_eos = 0;
    /* out of range: refused at submit */
    r.top_logprobs = PM_MAX_TOP_LOGPROBS + 1;
    submit_refused(f, &r, "top_logprobs");
}

/* What a penalized sequence sampled from, step by step: its logits (the engine's last), its token
 * and the log-probability reported for it. */
typedef struct pen_rec {
    pm_engine *eng;
    int64_t id;
    int n;
    int32_t tok[STEPS];
    float *lg[STEPS];
    float lp[STEPS];
    pm_finish why;
    int done;
} pen_rec;

static void pen_on_done(void *u, pm_finish why, int p, int c, const char *err) {
    (void)p; (void)c; (void)err;
    ((pen_rec *)u)->why = why;
    ((pen_rec *)u)->done++;
}

static void pen_on_logprobs(void *u, pm_logprob chosen, const pm_logprob *top, int n_top) {
    (void)top; (void)n_top;
    pen_rec *c = u;
    if (c->n < STEPS) c->lp[c->n] = chosen.logprob;
}

static int pen_on_token(void *u, int32_t tok, const char *text, size_t len) {
    (void)text; (void)len;
    pen_rec *c = u;
    if (c->n >= STEPS) return 0;
    const float *lg = pm_engine_last_logits(c->eng, c->id, NULL, NULL);
    c->lg[c->n] = malloc(sizeof(float) * 200064);
    memcpy(c->lg[c->n], lg, sizeof(float) * 200064);
    c->tok[c->n++] = tok;
    return 0;
}

static void run_pen(fx *f, const pm_request *r, pen_rec *c) {
    char err[512];
    memset(c, 0, sizeof *c);
    assert_int_equal(pm_engine_new(&c->eng, f->m, NULL, err, sizeof err), 0);
    pm_callbacks cb = {.on_token = pen_on_token, .on_done = pen_on_done, .user = c, .on_logprobs = pen_on_logprobs};
    assert_int_equal(pm_engine_submit(c->eng, r, &cb, &c->id, err, sizeof err), 0);
    while (pm_engine_live(c->eng) > 0) assert_true(pm_engine_step(c->eng) >= 0);
    pm_engine_free(c->eng);
}

static void pen_free(pen_rec *c) {
    for (int i = 0; i < c->n; i++) free(c->lg[i]);
}

/* Biases and penalties: each step's logits are the model's (a teacher-forced run of the prefix
 * gives them) with the definitions applied over the prompt and the tokens so far; greedy takes
 * their argmax; the reported log-probabilities stay the model's. */
static void test_penalties(void **state) {
    fx *f = *state;
    const int V = 200064;
    int32_t ids[16 + STEPS] = {200022, 2028, 553, 261, 10297, 29186, 13, 200020, 200021, 2028, 553, 261, 10297, 13, 200020, 200019};
    const int np = 16;
    const pm_logit_bias bias[] = {{1000, 1.5f}, {2028, -0.5f}, {1000, 0.25f}};
    pm_request r = {.ids = ids, .n_ids = (size_t)np, .max_tokens = STEPS, .logprobs = 1, .logit_bias = bias, .n_logit_bias = 3};
    r.sampling.frequency_penalty = 0.7f;
    r.sampling.presence_penalty = 0.4f;
    r.sampling.repetition_penalty = 1.3f;
    pen_rec a, b;
    run_pen(f, &r, &a);
    assert_int_equal(a.n, STEPS);
    for (int k = 0; k < STEPS; k++) {
        pm_request t = {.ids = ids, .n_ids = (size_t)(np + k), .max_tokens = 1};
        run_pen(f, &t, &b); /* the model's logits after the prompt and a's first k tokens */
        assert_int_equal(b.n, 1);
        float *x = b.lg[0];
        double lse = pm_logsumexp(x, V);
        assert_float_equal(a.lp[k], x[a.tok[k]] - lse, 2e-4); /* the model's log-probability */
        for (int i = 0; i < 3; i++) x[bias[i].token] += bias[i].bias;
        for (int v = 0; v < V; v++) {
            int cnt = 0, seen = 0;
            for (int i = 0; i < np + k; i++) {
                seen |= ids[i] == v;
                cnt += i >= np && ids[i] == v;
            }
            if (!seen) continue;
            x[v] = x[v] > 0 ? x[v] / 1.3f : x[v] * 1.3f;
            if (cnt) x[v] -= (float)cnt * 0.7f + 0.4f;
        }
        double maxd = 0;
        for (int v = 0; v < V; v++) maxd = fmax(maxd, fabs((double)x[v] - a.lg[k][v]));
        /* the prefill's last row and the step's row go through different lm_head kernels: the
         * same sums to rounding (4e-5 seen on logits of 10) */
        assert_true(maxd < 2e-4);
        assert_true(x[a.tok[k]] >= x[pm_argmax(x, V)] - 4e-4f);
        ids[np + k] = a.tok[k];
        pen_free(&b);
    }
    pen_free(&a);
    /* a token biased by 100 comes every step, greedy or sampled; banned, it never does */
    pm_logit_bias force = {1000, 100.0f};
    pm_request g = {.ids = ids, .n_ids = (size_t)np, .max_tokens = STEPS, .logit_bias = &force, .n_logit_bias = 1};
    for (int temp = 0; temp < 2; temp++) {
        g.sampling.temperature = temp ? 1.0f : 0.0f;
        g.sampling.seed = 5;
        run_pen(f, &g, &a);
        assert_int_equal(a.n, STEPS);
        for (int k = 0; k < STEPS; k++) assert_int_equal(a.tok[k], 1000);
        pen_free(&a);
    }
    g.sampling.temperature = 0;
    g.n_logit_bias = 0;
    run_pen(f, &g, &a); /* unbiased greedy */
    force.token = a.tok[0];
    force.bias = -100.0f;
    g.n_logit_bias = 1;
    run_pen(f, &g, &b);
    for (int k = 0; k < b.n; k++) assert_int_not_equal(b.tok[k], force.token);
    pen_free(&a);
    pen_free(&b);
    /* refused at submit: an id outside the vocabulary, a negative repetition penalty */
    force.token = V;
    submit_refused(f, &g, "logit_bias[0]");
    g.n_logit_bias = 0;
    g.sampling.repetition_penalty = -1.0f;
    submit_refused(f, &g, "penalties");
}

/* JSON mode: the output stays a prefix of an object (a fresh recognizer takes every token's
 * bytes), each step's logits are the model's with the others at -inf, the reported
 * log-probabilities stay the model's; pushed to close (a bias on "}"), the request ends with the
 * complete object and an end token. */
static int is_end(const fx *f, int32_t t) {
    for (int i = 0; i < f->m->llm.c.n_eos; i++)
        if (f->m->llm.c.eos_ids[i] == t) return 1;
    return 0;
}

/* min_tokens and ignore_eos: with the end token pushed to the top, it comes at once; banned
 * until min_tokens, it comes right after them; ignored, the request runs to max_tokens. */
static void test_min_tokens(void **state) {
    fx *f = *state;
    int32_t ids[] = {200021, 2028, 553, 261, 13, 200020, 200019};
    pm_logit_bias end = {f->m->llm.c.eos_ids[0], 100.0f};
    pm_request r = {.ids = ids, .n_ids = 7, .max_tokens = STEPS, .logit_bias = &end, .n_logit_bias = 1};
    pen_rec a;
    int want[3] = {1, 4, STEPS};
    for (int k = 0; k < 3; k++) {
        r.min_tokens = k == 1 ? 3 : 0;
        r.ignore_eos = k == 2;
        run_pen(f, &r, &a);
        assert_int_equal(a.done, 1);
        assert_int_equal(a.n, want[k]);
        assert_int_equal(a.why, k == 2 ? PM_FINISH_LENGTH : PM_FINISH_STOP);
        for (int i = 0; i < a.n; i++) assert_int_equal(is_end(f, a.tok[i]), k < 2 && i == a.n - 1);
        pen_free(&a);
    }
    r.ignore_eos = 0;
    r.min_tokens = -1;
    submit_refused(f, &r, "min_tokens");
}


/* What a request said: its tokens, its text joined, how it ended and what it counted. */
typedef struct txt_rec {
    int32_t tok[STEPS];
    int n_tok;
    char text[4096];
    size_t len;
    pm_finish why;
    int completion, done;
    int code; /* on_error's class (0: none came) */
} txt_rec;

static int txt_on_token(void *u, int32_t tok, const char *text, size_t len) {
    txt_rec *c = u;
    if (c->n_tok < STEPS) c->tok[c->n_tok++] = tok;
    if (c->len + len < sizeof c->text) {
        memcpy(c->text + c->len, text, len);
        c->len += len;
        c->text[c->len] = 0;
    }
    return 0;
}

static void txt_on_error(void *u, int code) {
    txt_rec *c = u;
    assert_int_equal(c->done, 0); /* before on_done */
    c->code = code;
}

static void txt_on_done(void *u, pm_finish why, int p, int comp, const char *err) {
    (void)p; (void)err;
    txt_rec *c = u;
    c->why = why;
    c->completion = comp;
    c->done++;
}

static void run_txt(fx *f, const pm_request *r, txt_rec *c) {
    pm_engine *eng;
    char err[512];
    int64_t id;
    memset(c, 0, sizeof *c);
    assert_int_equal(pm_engine_new(&eng, f->m, NULL, err, sizeof err), 0);
    pm_callbacks cb = {.on_token = txt_on_token, .on_done = txt_on_done, .user = c, .on_error = txt_on_error};
    if (pm_engine_submit(eng, r, &cb, &id, err, sizeof err)) fail_msg("%s", err);
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    pm_engine_free(eng);
    assert_int_equal(c->done, 1);
    assert_int_equal(c->code != 0, c->why == PM_FINISH_ERROR); /* a class exactly with an error */
}

static const char *tok_text(const fx *f, int32_t t, size_t *len) { return pm_model_token_bytes(f->m, t, len); }

/* Stop tokens (vLLM's stop_token_ids), what ended a request kept in the text (include_stop_str_in_output)
 * and special tokens' text (skip_special_tokens false): a stop token ends the request where it comes,
 * counted, its text left out unless kept; min_tokens holds it back, ignore_eos does not; a stop
 * string's text stays with stop_in_output; a special token gives its text only when kept, the end
 * token too where what ended the request is kept. */
static void test_stops(void **state) {
    fx *f = *state;
    int32_t ids[] = {200021, 2028, 553, 261, 13, 200020, 200019};
    pm_request r = {.ids = ids, .n_ids = 7, .max_tokens = STEPS, .ignore_eos = 1};
    txt_rec free_run, a;
    run_txt(f, &r, &free_run);
    assert_int_equal(free_run.n_tok, STEPS);
    /* the first token from the third on that came nowhere before it stops the answer */
    int k = 2;
    while (k < STEPS && (free_run.tok[k] == free_run.tok[0] || free_run.tok[k] == free_run.tok[1] ||
                         (k > 2 && free_run.tok[k] == free_run.tok[2])))
        k++;
    assert_true(k < 4);
    size_t before = 0, l;
    for (int i = 0; i < k; i++) {
        tok_text(f, free_run.tok[i], &l);
        before += l;
    }
    tok_text(f, free_run.tok[k], &l);
    int32_t stop_id = free_run.tok[k];
    for (int keep = 0; keep < 2; keep++) {
        r.stop_ids = &stop_id;
        r.n_stop_ids = 1;
        r.stop_in_output = keep;
        run_txt(f, &r, &a); /* ignore_eos leaves the stop token be */
        assert_int_equal(a.why, PM_FINISH_STOP);
        assert_int_equal(a.n_tok, k + 1);
        assert_int_equal(a.completion, k + 1);
        assert_int_equal(a.tok[k], stop_id);
        assert_int_equal(a.len, before + (keep ? l : 0));
        assert_memory_equal(a.text, free_run.text, a.len);
    }
    /* min_tokens bans the stop token until it is met: the first token is another */
    int32_t first = free_run.tok[0];
    r.stop_ids = &first;
    r.stop_in_output = 0;
    r.min_tokens = 1;
    run_txt(f, &r, &a);
    assert_int_not_equal(a.tok[0], first);
    r.min_tokens = 0;
    run_txt(f, &r, &a);
    assert_int_equal(a.n_tok, 1);
    assert_int_equal(a.len, 0);
    /* a stop string: cut before it, or after it with stop_in_output */
    r.n_stop_ids = 0;
    char stop[64];
    size_t cut = 0, sl = 0;
    for (int i = 1; i < STEPS && !sl; i++) { /* a later token's text that the text before it does not hold */
        const char *b = tok_text(f, free_run.tok[i], &l);
        size_t at = 0;
        for (int j = 0; j < i; j++) at += (tok_text(f, free_run.tok[j], &sl), sl);
        sl = 0;
        if (l > 0 && l < sizeof stop && memchr(b, 0, l) == NULL) {
            memcpy(stop, b, l);
            stop[l] = 0;
            char head[4096];
            memcpy(head, free_run.text, at + l - 1);
            head[at + l - 1] = 0;
            if (!strstr(head, stop) && (size_t)(strstr(free_run.text, stop) - free_run.text) == at) {
                cut = at;
                sl = l;
            }
        }
    }
    assert_true(sl > 0);
    const char *stops[] = {stop};
    r.stop = stops;
    r.n_stop = 1;
    for (int keep = 0; keep < 2; keep++) {
        r.stop_in_output = keep;
        run_txt(f, &r, &a);
        assert_int_equal(a.why, PM_FINISH_STOP);
        assert_int_equal(a.len, cut + (keep ? sl : 0));
        assert_memory_equal(a.text, free_run.text, a.len);
    }
    r.n_stop = 0;
    r.stop_in_output = 0;
    /* a special token pushed to the top: no text, or its text when kept */
    int32_t special = -1;
    for (int32_t t = 200064 - 1; t >= 199990 && special < 0; t--)
        if (pm_tok_is_special(f->m->tok, t) && t != f->m->llm.c.eos_ids[0] && t != PM_TOK_IMAGE_ID && t != PM_TOK_AUDIO_ID) special = t;
    assert_true(special >= 0);
    pm_logit_bias push = {special, 100.0f};
    r.logit_bias = &push;
    r.n_logit_bias = 1;
    r.max_tokens = 2;
    const char *sp = tok_text(f, special, &l);
    for (int keep = 0; keep < 2; keep++) {
        r.keep_special = keep;
        run_txt(f, &r, &a);
        assert_int_equal(a.n_tok, 2);
        assert_int_equal(a.len, keep ? 2 * l : 0);
        if (keep) assert_memory_equal(a.text + l, sp, l);
    }
    /* the end token pushed to the top: its text only where both keep it */
    push.token = f->m->llm.c.eos_ids[0];
    r.ignore_eos = 0;
    const char *eos = tok_text(f, push.token, &l);
    for (int m = 0; m < 4; m++) {
        r.keep_special = m & 1;
        r.stop_in_output = m >> 1;
        run_txt(f, &r, &a);
        assert_int_equal(a.why, PM_FINISH_STOP);
        assert_int_equal(a.completion, 0);
        assert_int_equal(a.len, m == 3 ? l : 0);
        if (m == 3) assert_memory_equal(a.text, eos, l);
    }
    /* allowed_token_ids: greedy takes the most likely of the set (the model's logits of the free
     * run's first step), the log-probability reported stays the model's; a set that leaves nothing
     * (only the end token, banned by min_tokens) ends the request with an error, not a token */
    r.n_logit_bias = 0;
    r.keep_special = r.stop_in_output = 0;
    r.max_tokens = 1;
    r.ignore_eos = 1;
    pen_rec p0, p1;
    run_pen(f, &r, &p0);
    const float *lg0 = p0.lg[0];
    int32_t allow[3] = {free_run.tok[1], 1000, 2028};
    int32_t best = allow[0];
    for (int q = 1; q < 3; q++)
        if (lg0[allow[q]] > lg0[best] || (lg0[allow[q]] == lg0[best] && allow[q] < best)) best = allow[q];
    r.allowed_ids = allow;
    r.n_allowed_ids = 3;
    r.logprobs = 1;
    run_pen(f, &r, &p1);
    assert_int_equal(p1.n, 1);
    assert_int_equal(p1.tok[0], best);
    assert_float_equal(p1.lp[0], lg0[best] - pm_logsumexp(lg0, 200064), 2e-4);
    pen_free(&p0);
    pen_free(&p1);
    int32_t only_end = f->m->llm.c.eos_ids[0];
    r.allowed_ids = &only_end;
    r.n_allowed_ids = 1;
    r.ignore_eos = 0;
    r.min_tokens = 1;
    run_txt(f, &r, &a);
    assert_int_equal(a.why, PM_FINISH_ERROR);
    assert_int_equal(a.code, PM_EINVAL); /* the request's own bans: its fault */
    assert_int_equal(a.n_tok, 0);
    { /* a grammar that grows too ambiguous while decoding (only "z" allowed, so z's come): its
       * limit ends the request with the class PM_ELIMIT, after the z's it took */
        int32_t z = pm_model_token_id(f->m, "z");
        pm_request rg = r;
        rg.allowed_ids = &z;
        rg.min_tokens = 0;
        rg.max_tokens = 40;
        rg.format = PM_FORMAT_GRAMMAR;
        rg.grammar = "root ::= s\ns ::= \"z\" s \"y\" | \"z\" s . | \"\"\n";
        run_txt(f, &rg, &a);
        assert_int_equal(a.why, PM_FINISH_ERROR);
        assert_int_equal(a.code, PM_ELIMIT);
        assert_true(a.completion > 2 && a.completion < 40);
        for (int i = 0; i < a.n_tok; i++) assert_int_equal(a.tok[i], z);
    }
    r.n_allowed_ids = 0;
    r.min_tokens = 0;
    r.logprobs = 0;
    /* bad_words: the free run's second token's text as a word: never that token after the first */
    size_t bl = 0;
    const char *bw = tok_text(f, free_run.tok[1], &bl);
    char word[64];
    if (bl > 0 && bl < sizeof word) {
        memcpy(word, bw, bl);
        word[bl] = 0;
        const char *words[] = {word};
        r.bad_words = words;
        r.n_bad_words = 1;
        r.max_tokens = STEPS;
        r.ignore_eos = 1;
        run_txt(f, &r, &a);
        assert_int_equal(a.tok[0], free_run.tok[0]);
        assert_int_not_equal(a.tok[1], free_run.tok[1]);
        r.n_bad_words = 0;
    }
    /* truncate_prompt: the prompt's last 4 tokens, as a prompt of those alone (the same first token and
     * logits, bit for bit); with media, refused */
    {
        pm_request t1 = {.ids = ids, .n_ids = 7, .max_tokens = 1, .truncate_prompt = 4};
        pm_request t2 = {.ids = ids + 3, .n_ids = 4, .max_tokens = 1};
        pen_rec q1, q2;
        run_pen(f, &t1, &q1);
        run_pen(f, &t2, &q2);
        assert_int_equal(q1.n, 1);
        assert_int_equal(q2.n, 1);
        assert_int_equal(q1.tok[0], q2.tok[0]);
        assert_memory_equal(q1.lg[0], q2.lg[0], sizeof(float) * 200064);
        pen_free(&q1);
        pen_free(&q2);
        t1.audios = &f->clip;
        t1.n_audios = 1;
        int32_t with_audio[] = {200021, PM_TOK_AUDIO_ID, 13, 200020, 200019};
        t1.ids = with_audio;
        t1.n_ids = 5;
        submit_refused(f, &t1, "without images or audio");
    }
    /* refused at submit: an id outside the vocabulary, too many */
    int32_t bad = 200064;
    r.stop_ids = &bad;
    r.n_stop_ids = 1;
    submit_refused(f, &r, "stop token id");
    r.n_stop_ids = PM_MAX_STOP_IDS + 1;
    submit_refused(f, &r, "stop token ids");
}


static void test_json_mode(void **state) {
    fx *f = *state;
    const int V = 200064;
    const pm_tokenizer *tok = f->m->tok;
    int32_t ids[] = {200021, 2028, 553, 261, 10297, 13, 200020, 200019};
    pm_request r = {.ids = ids, .n_ids = 8, .max_tokens = STEPS, .logprobs = 1, .format = PM_FORMAT_JSON_OBJECT};
    pen_rec a, t;
    for (int temp = 0; temp < 2; temp++) {
        r.sampling.temperature = temp ? 1.0f : 0.0f;
        r.sampling.seed = 9;
        run_pen(f, &r, &a);
        assert_true(a.n >= 2);
        pm_json_state js;
        pm_json_init(&js, pm_json_any_object());
        for (int k = 0; k < a.n; k++) {
            size_t len;
            const char *b = pm_tok_token_bytes(tok, a.tok[k], &len);
            assert_true(len > 0);
            if (is_end(f, a.tok[k])) { /* the end token: only after a complete object, and last */
                assert_true(pm_json_done(&js) && k == a.n - 1);
                break;
            }
            assert_int_equal(pm_json_feed(&js, b, len), 0);
            int finite = 0;
            for (int v = 0; v < V; v++) finite += !isinf(a.lg[k][v]);
            assert_true(finite > 0 && finite < V);
            if (!temp) assert_int_equal(a.tok[k], pm_argmax(a.lg[k], V));
        }
        if (!temp) { /* the first step's logits, where kept, are the plain run's; so is its log-probability */
            pm_request plain = r;
            plain.format = PM_FORMAT_TEXT;
            plain.max_tokens = 1;
            run_pen(f, &plain, &t);
            for (int v = 0; v < V; v++)
                if (!isinf(a.lg[0][v])) assert_true(a.lg[0][v] == t.lg[0][v]);
            assert_float_equal(a.lp[0], t.lg[0][a.tok[0]] - pm_logsumexp(t.lg[0], V), 1e-5);
            pen_free(&t);
        }
        pen_free(&a);
    }
    /* a bias on "}" closes the object at once: "{" (or "{" after whitespace), "}", then the end */
    pm_logit_bias close = {pm_tok_id(tok, "}"), 100.0f};
    assert_true(close.token > 0);
    r.sampling.temperature = 0;
    r.logit_bias = &close;
    r.n_logit_bias = 1;
    r.max_tokens = 40;
    run_pen(f, &r, &a);
    assert_true(a.n >= 2 && a.n < 40);
    assert_true(is_end(f, a.tok[a.n - 1]));
    size_t cl;
    const char *cb_ = pm_tok_token_bytes(tok, a.tok[a.n - 2], &cl);
    assert_true(cl > 0 && cb_[cl - 1] == '}'); /* "}" or a token ending in it */
    pm_json_state js;
    pm_json_init(&js, pm_json_any_object());
    for (int k = 0; k < a.n - 1; k++) {
        size_t len;
        const char *b = pm_tok_token_bytes(tok, a.tok[k], &len);
        assert_int_equal(pm_json_feed(&js, b, len), 0);
    }
    assert_true(pm_json_done(&js)); /* and the run ended there: the end token came next */
    pen_free(&a);
    /* a schema: an enum at the top ends with one of its values and the end token */
    r.logit_bias = NULL;
    r.n_logit_bias = 0;
    r.format = PM_FORMAT_JSON_SCHEMA;
    r.json_schema = "{\"enum\": [\"yes\", \"no\", \"maybe\", 42]}";
    run_pen(f, &r, &a);
    char out[256] = "";
    for (int k = 0; k + 1 < a.n; k++) {
        size_t len;
        const char *b = pm_tok_token_bytes(tok, a.tok[k], &len);
        strncat(out, b, len);
    }
    assert_true(a.n >= 2 && is_end(f, a.tok[a.n - 1]));
    assert_true(!strcmp(out, "\"yes\"") || !strcmp(out, "\"no\"") || !strcmp(out, "\"maybe\"") || !strcmp(out, "42"));
    pen_free(&a);
    /* refused at submit: a schema it cannot hold, an unknown format */
    r.json_schema = "{\"type\": \"string\", \"format\": \"date\", \"pattern\": \"^a(?!b)\"}";
    submit_refused(f, &r, "pattern: lookaround");
    r.json_schema = "{\"type\": \"array\", \"uniqueItems\": true}";
    submit_refused(f, &r, "'uniqueItems'");
    r.format = (pm_format)7;
    submit_refused(f, &r, "response format");
}

/* Guided decoding (PM_FORMAT_REGEX, PM_FORMAT_CHOICE): greedy and sampled answers, alone and with
 * drafts from a prediction, are whole matches (POSIX regexec is the independent judge) ending with
 * an end token; the logits kept are the model's; a finished choice ends even under min_tokens; bad
 * patterns and lists are refused at submit with their reason. */
enum { GUIDED_STEPS = 48 };
typedef struct guided_rec {
    pm_engine *eng;
    int64_t id;
    int n, finite_min;
    int32_t tok[GUIDED_STEPS];
    char text[1024];
    pm_finish why;
} guided_rec;

static int guided_on_token(void *u, int32_t tok, const char *text, size_t len) {
    guided_rec *c = u;
    const float *lg = pm_engine_last_logits(c->eng, c->id, NULL, NULL);
    int finite = 0;
    for (int v = 0; v < 200064; v++) finite += !isinf(lg[v]);
    if (finite < c->finite_min || c->finite_min < 0) c->finite_min = finite;
    if (c->n < GUIDED_STEPS) c->tok[c->n++] = tok;
    strncat(c->text, text, len < sizeof c->text - strlen(c->text) - 1 ? len : sizeof c->text - strlen(c->text) - 1);
    return 0;
}

static void guided_on_done(void *u, pm_finish why, int p, int c, const char *err) {
    (void)p; (void)c;
    if (err) fprintf(stderr, "guided: %s\n", err);
    ((guided_rec *)u)->why = why;
}

static void run_guided(fx *f, const pm_request *r, const pm_engine_opts *o, guided_rec *c) {
    char err[512];
    memset(c, 0, sizeof *c);
    c->finite_min = -1;
    assert_int_equal(pm_engine_new(&c->eng, f->m, o, err, sizeof err), 0);
    pm_callbacks cb = {.on_token = guided_on_token, .on_done = guided_on_done, .user = c};
    if (pm_engine_submit(c->eng, r, &cb, &c->id, err, sizeof err)) fail_msg("%s", err);
    while (pm_engine_live(c->eng) > 0) assert_true(pm_engine_step(c->eng) >= 0);
    pm_engine_free(c->eng);
}

static int posix_fullmatch(const char *ere, const char *text) {
    regex_t re;
    assert_int_equal(regcomp(&re, ere, REG_EXTENDED | REG_NOSUB), 0);
    int ok = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static void test_guided(void **state) {
    fx *f = *state;
    int32_t ids[] = {200021, 2028, 553, 261, 10297, 13, 200020, 200019};
    const char *choices[] = {"red", "green", "dark blue", "blue", "n\xc3\xa9on"};
    pm_request r = {.ids = ids, .n_ids = 8, .max_tokens = GUIDED_STEPS, .format = PM_FORMAT_CHOICE, .choices = choices, .n_choices = 5};
    guided_rec a, b;
    int seen[5] = {0};
    for (int k = 0; k < 8; k++) {
        r.sampling.temperature = k ? 6.0f : 0.0f; /* the tiny model's logits span ~40 */
        r.sampling.seed = (uint64_t)k;
        run_guided(f, &r, NULL, &a);
        assert_int_equal(a.why, PM_FINISH_STOP);
        assert_true(a.n >= 2 && is_end(f, a.tok[a.n - 1]));
        int which = -1;
        for (int i = 0; i < 5; i++)
            if (!strcmp(a.text, choices[i])) which = i;
        if (which < 0) fail_msg("'%s' is none of the choices", a.text);
        seen[which] = 1;
        assert_true(a.finite_min >= 1 && a.finite_min < 1000);
    }
    assert_true(seen[0] + seen[1] + seen[2] + seen[3] + seen[4] >= 2); /* sampling reaches more than one */
    /* min_tokens cannot keep a finished choice going */
    r.sampling.temperature = 0;
    r.min_tokens = 40;
    run_guided(f, &r, NULL, &a);
    assert_int_equal(a.why, PM_FINISH_STOP);
    assert_true(a.n < 10);
    r.min_tokens = 0;
    /* a pattern: greedy and sampled, every answer a whole match */
    r.format = PM_FORMAT_REGEX;
    r.regex = "[0-9]{3}-[a-z]{2,4}( ok)?";
    for (int k = 0; k < 6; k++) {
        r.sampling.temperature = k ? 6.0f : 0.0f;
        r.sampling.seed = (uint64_t)(100 + k);
        run_guided(f, &r, NULL, &a);
        assert_int_equal(a.why, PM_FINISH_STOP);
        if (!posix_fullmatch("^[0-9]{3}-[a-z]{2,4}( ok)?$", a.text)) fail_msg("'%s' does not match", a.text);
    }
    /* with a prediction drafted from (and an engine that drafts): the same tokens */
    r.sampling.temperature = 0;
    run_guided(f, &r, NULL, &a);
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.draft_tokens = 4;
    r.prediction = a.text;
    run_guided(f, &r, &o, &b);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.tok, b.tok, sizeof(int32_t) * (size_t)a.n);
    r.prediction = NULL;
    /* cut by max_tokens: the prefix so far, ended by length */
    r.max_tokens = 2;
    run_guided(f, &r, NULL, &a);
    assert_int_equal(a.why, PM_FINISH_LENGTH);
    r.max_tokens = GUIDED_STEPS;
    /* refused at submit */
    r.regex = "[0-9";
    submit_refused(f, &r, "guided pattern: the class opened at byte 0 is never closed");
    r.regex = ".*a.{16}";
    submit_refused(f, &r, "too large");
    r.regex = NULL;
    submit_refused(f, &r, "guided pattern");
    r.format = PM_FORMAT_CHOICE;
    r.n_choices = 0;
    submit_refused(f, &r, "guided choices hold 1..4096");
    r.n_choices = 5;
    r.json_lazy = 1;
    r.json_open = 1;
    r.json_close = 2;
    submit_refused(f, &r, "lazy JSON mode");
    r.json_lazy = 0;
    r.format = PM_FORMAT_TEXT;
    r.sampling.min_p = 1.5f;
    submit_refused(f, &r, "min_p");
}

/* Prompt-lookup drafting (pm_engine_opts.draft_tokens): a request decoded with drafts gives the
 * same tokens, logits and log-probabilities, bit for bit, as without, greedy or sampled, in JSON
 * mode too; pushed to repeat itself (a bias on a word), drafts are made, taken and turned down. */
enum { DRAFT_STEPS = 40 };
typedef struct draft_rec {
    pm_engine *eng;
    int64_t id;
    int n;
    int32_t tok[DRAFT_STEPS];
    float lp[DRAFT_STEPS];
    float *lg[DRAFT_STEPS];
    pm_finish why;
    int pred_drafted, pred_accepted; /* on_prediction's (-1: not called) */
} draft_rec;

static int draft_on_token(void *u, int32_t tok, const char *text, size_t len) {
    (void)text; (void)len;
    draft_rec *c = u;
    if (c->n >= DRAFT_STEPS) return 0;
    const float *lg = pm_engine_last_logits(c->eng, c->id, NULL, NULL);
    c->lg[c->n] = malloc(sizeof(float) * 200064);
    memcpy(c->lg[c->n], lg, sizeof(float) * 200064);
    c->tok[c->n++] = tok;
    return 0;
}
static void draft_on_lp(void *u, pm_logprob chosen, const pm_logprob *top, int n_top) {
    (void)top; (void)n_top;
    draft_rec *c = u;
    if (c->n < DRAFT_STEPS) c->lp[c->n] = chosen.logprob;
}
static void draft_on_prediction(void *u, int drafted, int accepted) {
    draft_rec *c = u;
    c->pred_drafted = drafted;
    c->pred_accepted = accepted;
}
static void draft_on_done(void *u, pm_finish why, int p, int c, const char *err) {
    (void)p; (void)c; (void)err;
    ((draft_rec *)u)->why = why;
}

static void run_draft(fx *f, const pm_request *r, int draft, draft_rec *c, int64_t *drafted, int64_t *accepted) {
    char err[512];
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.draft_tokens = draft;
    memset(c, 0, sizeof *c);
    c->pred_drafted = c->pred_accepted = -1;
    assert_int_equal(pm_engine_new(&c->eng, f->m, &o, err, sizeof err), 0);
    pm_callbacks cb = {.on_token = draft_on_token, .on_done = draft_on_done, .user = c, .on_logprobs = draft_on_lp,
                       .on_prediction = draft_on_prediction};
    assert_int_equal(pm_engine_submit(c->eng, r, &cb, &c->id, err, sizeof err), 0);
    while (pm_engine_live(c->eng) > 0) assert_true(pm_engine_step(c->eng) >= 0);
    pm_engine_draft_stats(c->eng, drafted, accepted);
    pm_engine_free(c->eng);
}

static void test_draft(void **state) {
    fx *f = *state;
    const int V = 200064;
    char prompt[2048] = "<|user|>Repeat after me: ";
    for (int i = 0; i < 12; i++) strcat(prompt, "red green blue ");
    strcat(prompt, "<|end|><|assistant|>red green blue");
    /* " red" at every step: the prompt drafts "green blue ..." after "blue red" (turned down), the
     * answer drafts " red"s once it repeats itself (taken) */
    pm_logit_bias push = {pm_model_token_id(f->m, "\xc4\xa0red"), 100.0f};
    assert_true(push.token > 0);
    for (int mode = 0; mode < 4; mode++) {
        pm_request r = {.prompt = prompt, .max_tokens = DRAFT_STEPS - 1, .logprobs = 1, .top_logprobs = 3,
                        .logit_bias = &push, .n_logit_bias = mode < 3};
        if (mode == 1) {
            r.sampling.temperature = 0.9f;
            r.sampling.seed = 7;
        }
        if (mode == 2) r.format = PM_FORMAT_JSON_OBJECT;
        draft_rec a, b;
        int64_t d0, a0, d1, a1;
        run_draft(f, &r, 0, &a, &d0, &a0);
        run_draft(f, &r, 4, &b, &d1, &a1);
        assert_true(d0 == 0 && a0 == 0);
        assert_int_equal(a.n, b.n);
        assert_int_equal(a.why, b.why);
        assert_memory_equal(a.tok, b.tok, sizeof(int32_t) * (size_t)a.n);
        assert_memory_equal(a.lp, b.lp, sizeof(float) * (size_t)a.n);
        for (int k = 0; k < a.n; k++) assert_memory_equal(a.lg[k], b.lg[k], sizeof(float) * (size_t)V);
        printf("  mode %d: %d tokens, %lld drafted, %lld taken\n", mode, a.n, (long long)d1, (long long)a1);
        if (mode < 2) assert_true(a1 > 0 && a1 < d1); /* drafts taken and turned down */
        for (int k = 0; k < a.n; k++) { free(a.lg[k]); free(b.lg[k]); }
    }
}

/* Predicted outputs (pm_request.prediction): the same tokens, logits and log-probabilities, bit for
 * bit, as without, whatever the prediction (the answer itself, the answer cut in two with a line
 * between, unrelated text), greedy or sampled, in an engine that drafts or not; drafts come from it
 * and, where it holds, are taken. */
static void test_prediction(void **state) {
    fx *f = *state;
    const int V = 200064;
    pm_request r = {.prompt = "<|user|>Write a long story.<|end|><|assistant|>", .max_tokens = DRAFT_STEPS - 1, .logprobs = 1,
                    .top_logprobs = 3};
    draft_rec a, b;
    int64_t d, t;
    run_draft(f, &r, 0, &a, &d, &t);
    assert_int_equal(a.pred_drafted, -1); /* no prediction: not called */
    /* the answer's text as the model would write it (byte-level tokens), whole and edited */
    char answer[8192] = "", edited[8192 + 64] = "";
    for (int k = 0; k < a.n; k++) {
        size_t len = 0;
        const char *bytes = pm_model_token_bytes(f->m, a.tok[k], &len);
        strncat(answer, bytes, len);
        if (k == a.n / 2) strcat(edited, "\nAn inserted line.\n");
        strncat(edited, bytes, len);
    }
    const char *preds[3] = {answer, edited, "Nothing like the answer at all, not a word of it."};
    for (int mode = 0; mode < 4; mode++) {
        pm_request q = r;
        q.prediction = preds[mode % 3];
        if (mode == 3) {
            q.sampling.temperature = 0.9f;
            q.sampling.seed = 11;
        }
        draft_rec ref;
        const draft_rec *base = &a;
        if (mode == 3) {
            pm_request s = q;
            s.prediction = NULL;
            run_draft(f, &s, 0, &ref, &d, &t);
            base = &ref;
        }
        run_draft(f, &q, mode == 1 ? 4 : 0, &b, &d, &t); /* mode 1: beside prompt lookup */
        assert_int_equal(base->n, b.n);
        assert_int_equal(base->why, b.why);
        assert_memory_equal(base->tok, b.tok, sizeof(int32_t) * (size_t)b.n);
        assert_memory_equal(base->lp, b.lp, sizeof(float) * (size_t)b.n);
        for (int k = 0; k < b.n; k++) assert_memory_equal(base->lg[k], b.lg[k], sizeof(float) * (size_t)V);
        printf("  prediction %d: %d tokens, %d drafted from it, %d taken\n", mode, b.n, b.pred_drafted, b.pred_accepted);
        assert_true(b.pred_drafted >= b.pred_accepted && b.pred_accepted >= 0);
        if (mode < 2) assert_true(b.pred_accepted >= b.n / 2); /* the answer, or most of it, came as drafts */
        if (mode == 2) assert_int_equal(b.pred_accepted, 0);
        for (int k = 0; k < b.n; k++) free(b.lg[k]);
        if (mode == 3)
            for (int k = 0; k < ref.n; k++) free(ref.lg[k]);
    }
    for (int k = 0; k < a.n; k++) free(a.lg[k]);
    /* too long: refused with the limit named */
    char *big = malloc((size_t)PM_MAX_PREDICTION + 2);
    memset(big, 'a', (size_t)PM_MAX_PREDICTION + 1);
    big[PM_MAX_PREDICTION + 1] = 0;
    pm_request q = r;
    q.prediction = big;
    submit_refused(f, &q, "prediction holds at most");
    free(big);
}

/* Lazy JSON mode (pm_request.json_lazy, tool calls on auto): until the model writes the opening
 * token the answer is the plain one, token for token; pushed to write it, what follows is a value
 * of the schema, then the closing or an end token, which ends the request. */
static void test_json_lazy(void **state) {
    fx *f = *state;
    const pm_tokenizer *tok = f->m->tok;
    int32_t ids[] = {200021, 2028, 553, 261, 10297, 13, 200020, 200019};
    int32_t open = pm_model_token_id(f->m, "<|tool_call|>"), close = pm_model_token_id(f->m, "<|/tool_call|>");
    assert_true(open > 0 && close > 0 && open != close);
    pm_request plain = {.ids = ids, .n_ids = 8, .max_tokens = STEPS};
    pm_request r = plain;
    r.format = PM_FORMAT_JSON_SCHEMA;
    r.json_schema = "{\"enum\": [\"yes\", \"no\"]}";
    r.json_lazy = 1;
    r.json_open = open;
    r.json_close = close;
    pen_rec a, b;
    run_pen(f, &plain, &a);
    run_pen(f, &r, &b);
    for (int k = 0; k < a.n; k++) assert_int_not_equal(a.tok[k], open); /* the model does not open on its own here */
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.tok, b.tok, sizeof(int32_t) * (size_t)a.n);
    assert_int_equal(a.why, b.why);
    pen_free(&a);
    pen_free(&b);
    /* made to open at once: the opening token, the value, then the closing or an end token, last */
    pm_logit_bias push = {open, 100.0f};
    r.logit_bias = &push;
    r.n_logit_bias = 1;
    r.max_tokens = 40;
    run_pen(f, &r, &b);
    assert_int_equal(b.done, 1);
    assert_int_equal(b.why, PM_FINISH_STOP);
    assert_true(b.n >= 3 && b.n <= STEPS && b.tok[0] == open);
    assert_true(b.tok[b.n - 1] == close || is_end(f, b.tok[b.n - 1]));
    char out[256] = "";
    for (int k = 1; k + 1 < b.n; k++) {
        size_t len;
        const char *t = pm_tok_token_bytes(tok, b.tok[k], &len);
        strncat(out, t, len);
    }
    assert_true(!strcmp(out, "\"yes\"") || !strcmp(out, "\"no\""));
    pen_free(&b);
    /* refused at submit: lazy without a JSON format, the same token twice, an id outside the vocabulary */
    r.format = PM_FORMAT_TEXT;
    submit_refused(f, &r, "lazy JSON");
    r.format = PM_FORMAT_JSON_OBJECT;
    r.json_close = open;
    submit_refused(f, &r, "lazy JSON");
    r.json_close = 200064;
    submit_refused(f, &r, "lazy JSON");
}

static void test_adapter_policy(void **state) {
    fx *f = *state;
    pm_request r = {0};
    assert_int_equal(pm_request_mode(&r), PM_MODE_LANGUAGE);
    r.n_audios = 1;
    assert_int_equal(pm_request_mode(&r), PM_MODE_SPEECH);
    r.n_images = 1;
    assert_int_equal(pm_request_mode(&r), PM_MODE_VISION_SPEECH);
    r.n_audios = 0;
    assert_int_equal(pm_request_mode(&r), PM_MODE_VISION);
    pm_engine *eng;
    char err[512];
    assert_int_equal(pm_engine_new(&eng, f->m, NULL, err, sizeof err), 0);
    pm_request a = {0}, t = {0};
    a.prompt = "<|user|><|audio_1|>hi<|end|><|assistant|>";
    a.audios = &f->clip;
    a.n_audios = 1;
    a.max_tokens = 3;
    t.prompt = "<|user|>hi<|end|><|assistant|>";
    t.max_tokens = 3;
    int64_t ia, it;
    assert_int_equal(pm_engine_submit(eng, &a, NULL, &ia, err, sizeof err), 0);
    assert_int_equal(pm_engine_submit(eng, &t, NULL, &it, err, sizeof err), 0);
    while (pm_engine_live(eng)) {
        if (pm_engine_seq_adapter(eng, ia) >= 0) assert_int_equal(pm_engine_seq_adapter(eng, ia), PM_ADAPTER_SPEECH);
        if (pm_engine_seq_adapter(eng, it) >= 0) assert_int_equal(pm_engine_seq_adapter(eng, it), PM_ADAPTER_NONE);
        pm_engine_step(eng);
    }
    pm_engine_free(eng);
}

typedef struct done_rec { int calls; pm_finish why; } done_rec;
static void rec_done(void *u, pm_finish why, int p, int c, const char *err) {
    (void)p; (void)c; (void)err;
    done_rec *d = u;
    d->calls++;
    d->why = why;
}

static void test_cancel_and_bad_requests(void **state) {
    fx *f = *state;
    pm_engine *eng;
    char err[512];
    assert_int_equal(pm_engine_new(&eng, f->m, NULL, err, sizeof err), 0);
    done_rec d = {0};
    pm_callbacks cb = {.on_done = rec_done, .user = &d};
    pm_request r = {0};
    r.prompt = "<|user|>hello<|end|><|assistant|>";
    r.max_tokens = 100;
    int64_t id;
    assert_int_equal(pm_engine_submit(eng, &r, &cb, &id, err, sizeof err), 0);
    pm_engine_step(eng);
    assert_int_equal(pm_engine_cancel(eng, id), 0);
    pm_engine_step(eng);
    assert_int_equal(pm_engine_live(eng), 0);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.why, PM_FINISH_CANCELLED);
    /* three placeholders for one clip; no clip for a placeholder; zero max_tokens */
    pm_request bad = {0};
    bad.prompt = "<|user|><|audio_1|><|audio_2|><|audio_3|>x<|end|><|assistant|>";
    bad.audios = &f->clip;
    bad.n_audios = 1;
    bad.max_tokens = 4;
    assert_int_equal(pm_engine_submit(eng, &bad, &cb, NULL, err, sizeof err), PM_EPLACEHOLDER);
    assert_non_null(strstr(err, "audio"));
    bad.n_audios = 0;
    bad.prompt = "<|user|><|audio_1|>x<|end|><|assistant|>";
    assert_int_equal(pm_engine_submit(eng, &bad, &cb, NULL, err, sizeof err), PM_EPLACEHOLDER);
    assert_string_equal(pm_status_name(PM_EPLACEHOLDER), "placeholder_mismatch");
    bad.prompt = "<|user|>x<|end|><|assistant|>";
    bad.max_tokens = 0;
    assert_true(pm_engine_submit(eng, &bad, &cb, NULL, err, sizeof err) < 0);
    /* an id outside the vocabulary: refused by the plan, named with its position */
    int32_t far[3] = {5, 6, 200064};
    pm_request ids = {.ids = far, .n_ids = 3, .max_tokens = 2};
    int64_t need;
    assert_int_equal(pm_engine_kv_need(eng, &ids, &need, err, sizeof err), PM_EINVAL);
    assert_non_null(strstr(err, "200064 at position 2"));
    /* a crop limit outside 1..4096 (0: the checkpoint's) */
    pm_request crops = {.prompt = "<|user|>x<|end|><|assistant|>", .max_tokens = 2, .max_crops = 4097};
    assert_int_equal(pm_engine_kv_need(eng, &crops, &need, err, sizeof err), PM_EINVAL);
    assert_non_null(strstr(err, "max_crops 4097"));
    crops.max_crops = -1;
    assert_int_equal(pm_engine_kv_need(eng, &crops, &need, err, sizeof err), PM_EINVAL);
    assert_int_equal(d.calls, 1); /* refused requests never call back */
    pm_engine_free(eng);
}

/* ---- prompt log-probabilities (pm_request.prompt_logprobs: OpenAI's echo with logprobs) ---- */

typedef struct plp_rec {
    pm_engine *eng;
    int n, cap, order_ok, tokens, done;
    pm_finish why;
    int completion, cached;
    pm_logprob *chosen, (*top)[3];
    int *n_top;
} plp_rec;

static void plp_on_prompt(void *u, int pos, pm_logprob chosen, const pm_logprob *top, int n_top) {
    plp_rec *c = u;
    if (pos != c->n || c->n >= c->cap || c->tokens || n_top > 3) { c->order_ok = 0; return; }
    c->chosen[c->n] = chosen;
    c->n_top[c->n] = n_top;
    if (n_top) memcpy(c->top[c->n], top, sizeof(pm_logprob) * (size_t)n_top);
    c->n++;
}
static int plp_on_token(void *u, int32_t tok, const char *text, size_t len) {
    (void)tok; (void)text; (void)len;
    ((plp_rec *)u)->tokens++;
    return 0;
}
static void plp_on_done(void *u, pm_finish why, int p, int comp, const char *err) {
    (void)p; (void)err;
    plp_rec *c = u;
    c->done++;
    c->why = why;
    c->completion = comp;
}
static void plp_init(plp_rec *c, int cap) {
    memset(c, 0, sizeof *c);
    c->cap = cap;
    c->order_ok = 1;
    c->chosen = calloc((size_t)cap, sizeof *c->chosen);
    c->top = calloc((size_t)cap, sizeof *c->top);
    c->n_top = calloc((size_t)cap, sizeof *c->n_top);
}
static void plp_free(plp_rec *c) { free(c->chosen); free(c->top); free(c->n_top); }
static void plp_same(const plp_rec *a, const plp_rec *b) {
    assert_int_equal(a->n, b->n);
    for (int p = 1; p < a->n; p++) { /* entry 0's NAN never compares equal: from 1 */
        assert_memory_equal(&a->chosen[p], &b->chosen[p], sizeof a->chosen[p]);
        assert_int_equal(a->n_top[p], b->n_top[p]);
        assert_memory_equal(a->top[p], b->top[p], sizeof(pm_logprob) * (size_t)a->n_top[p]);
    }
}

/* Scores r's prompt in one engine with opts o: submitted (the steps prefill it), or encoded and
 * prefilled `rows` at a time before admission (rows > 0), or with the LongRoPE recompute taken out
 * (o->recompute_beside). */
static void run_plp(fx *f, const pm_request *r, const pm_engine_opts *o, int rows, plp_rec *c) {
    pm_engine *eng;
    char err[512];
    assert_int_equal(pm_engine_new(&eng, f->m, o, err, sizeof err), 0);
    c->eng = eng;
    pm_callbacks cb = {.on_token = plp_on_token, .on_done = plp_on_done, .user = c, .on_prompt_logprobs = plp_on_prompt};
    if (rows > 0) {
        pm_encoded *enc = NULL;
        int rc;
        assert_int_equal(pm_engine_encode(eng, r, &enc, err, sizeof err), 0);
        while ((rc = pm_engine_prefill(eng, enc, rows, err, sizeof err)) == 0) {}
        assert_int_equal(rc, 1);
        assert_int_equal(pm_engine_submit_encoded(eng, enc, r, &cb, NULL, err, sizeof err), 0);
    } else {
        assert_int_equal(pm_engine_submit(eng, r, &cb, NULL, err, sizeof err), 0);
    }
    while (pm_engine_live(eng) > 0) {
        assert_true(pm_engine_step(eng) >= 0);
        pm_encoded *enc = NULL;
        if (pm_engine_take_recompute(eng, &enc, NULL) == 1) {
            int rc;
            while ((rc = pm_engine_prefill(eng, enc, 1500, err, sizeof err)) == 0) {}
            assert_int_equal(rc, 1);
            assert_int_equal(pm_engine_resume(eng, enc, NULL), 0);
        }
    }
    int64_t reserved;
    pm_engine_kv_usage(eng, &reserved, NULL);
    assert_int_equal(reserved, 0);
    pm_engine_free(eng);
}

/* A prompt scored token by token agrees with the log-probabilities its greedy continuation was
 * generated with (teacher forcing: the same tokens, prefill rows against decode rows); every entry
 * is in order, before any token, and the same whatever the chunks or the thread that prefilled; a
 * max_tokens 0 request generates nothing; a media prompt scores its placeholder rows too; a prompt
 * past original_max_position is scored once, on the long factors, also when its first prefill is
 * taken out of the steps. */
static void test_prompt_logprobs(void **state) {
    fx *f = *state;
    const char *prompt = "<|user|>What is the capital of France?<|end|><|assistant|>";
    pm_request g = {.prompt = prompt, .max_tokens = STEPS, .logprobs = 1, .top_logprobs = 3};
    lp_rec gen;
    run_lp(f, &g, &gen);
    assert_int_equal(gen.n_tok, STEPS);
    /* the prompt's ids: score the prompt alone first */
    pm_request sp = {.prompt = prompt, .prompt_logprobs = 1, .top_logprobs = 3};
    plp_rec a;
    plp_init(&a, 256);
    run_plp(f, &sp, NULL, 0, &a);
    assert_true(a.order_ok && a.done == 1 && a.why == PM_FINISH_LENGTH && a.completion == 0 && a.tokens == 0);
    int n = a.n;
    assert_true(n > 8);
    assert_true(isnan(a.chosen[0].logprob) && a.n_top[0] == 0);
    /* teacher forcing: prompt + the first STEPS - 1 generated tokens */
    int32_t ids[300];
    for (int p = 0; p < n; p++) ids[p] = a.chosen[p].token;
    for (int k = 0; k < STEPS - 1; k++) ids[n + k] = gen.tokens[k];
    pm_request tf = {0};
    tf.ids = ids;
    tf.n_ids = (size_t)(n + STEPS - 1);
    tf.prompt_logprobs = 1;
    tf.top_logprobs = 3;
    tf.max_tokens = 1;
    plp_rec b;
    plp_init(&b, 256);
    run_plp(f, &tf, NULL, 0, &b);
    assert_true(b.order_ok && b.done == 1 && b.tokens == 1 && b.n == n + STEPS - 1);
    double worst = 0;
    for (int p = 1; p < b.n; p++) {
        assert_int_equal(b.chosen[p].token, ids[p]);
        assert_true(b.chosen[p].logprob <= 0 && b.n_top[p] == 3);
        assert_true(b.top[p][0].logprob >= b.chosen[p].logprob);
        assert_true(b.top[p][0].logprob >= b.top[p][1].logprob && b.top[p][1].logprob >= b.top[p][2].logprob);
        if (p < n) assert_memory_equal(&b.chosen[p], &a.chosen[p], sizeof a.chosen[p]); /* a longer prompt scores its start alike */
    }
    for (int k = 0; k < STEPS - 1; k++) { /* position n + k holds generated token k */
        const pm_logprob *c = &b.chosen[n + k];
        assert_int_equal(c->token, gen.chosen[k].token);
        assert_int_equal(b.top[n + k][0].token, gen.top[k][0].token);
        double d = fabs(c->logprob - gen.chosen[k].logprob);
        if (d > worst) worst = d;
    }
    fprintf(stderr, "prompt scores against the generated tokens' log-probabilities: max |diff| %.2e\n", worst);
    assert_true(worst < 1e-3);

    /* chunks of 16 rows: the steps' prefill and the encoder thread's (8 rows a call) agree bit for bit */
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.prefill_chunk = 16;
    plp_rec c16, pre;
    plp_init(&c16, 256);
    plp_init(&pre, 256);
    run_plp(f, &tf, &o, 0, &c16);
    run_plp(f, &tf, &o, 8, &pre);
    assert_true(c16.order_ok && pre.order_ok && pre.done == 1 && pre.tokens == 1);
    plp_same(&c16, &pre);
    for (int p = 1; p < b.n; p++) assert_true(fabs(c16.chosen[p].logprob - b.chosen[p].logprob) < 1e-3);

    /* without on_prompt_logprobs: a scoring request still ends cleanly */
    pm_engine *eng;
    char err[512];
    assert_int_equal(pm_engine_new(&eng, f->m, NULL, err, sizeof err), 0);
    done_rec d = {0};
    pm_callbacks cb = {.on_done = rec_done, .user = &d};
    assert_int_equal(pm_engine_submit(eng, &sp, &cb, NULL, err, sizeof err), 0);
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    assert_true(d.calls == 1 && d.why == PM_FINISH_LENGTH);
    sp.max_tokens = -1;
    assert_int_equal(pm_engine_submit(eng, &sp, &cb, NULL, err, sizeof err), PM_EINVAL);
    pm_engine_free(eng);

    /* a media prompt: one entry per row after expansion, placeholders included */
    pm_request m = {0};
    m.prompt = "<|user|><|audio_1|>Transcribe the audio clip into text.<|end|><|assistant|>";
    m.audios = &f->clip;
    m.n_audios = 1;
    m.prompt_logprobs = 1;
    plp_rec am;
    plp_init(&am, 256);
    run_plp(f, &m, NULL, 0, &am);
    assert_true(am.order_ok && am.done == 1 && am.n == 36 && am.n_top[5] == 0); /* 36 rows, as the fixture's audio case */

    /* past original_max_position: long factors from the start; inline and taken out alike. The
     * last 43 positions are scored (each reads the keys of all before it): every row's vocabulary
     * head would be 4099 x 200k logits a run, most of this test's time under the sanitizers. */
    int L0 = f->m->llm.c.orig_max_pos;
    int32_t *lids = text_ids(L0 + 3, 17);
    pm_request lr = {0};
    lr.ids = lids;
    lr.n_ids = (size_t)(L0 + 3);
    lr.prompt_logprobs = 1;
    lr.prompt_logprobs_from = L0 - 40;
    lr.max_tokens = 2;
    plp_rec in, bs;
    plp_init(&in, L0 + 3);
    plp_init(&bs, L0 + 3);
    in.n = bs.n = L0 - 40; /* the first position expected */
    run_plp(f, &lr, NULL, 0, &in);
    o.prefill_chunk = 512;
    o.recompute_beside = 1;
    run_plp(f, &lr, &o, 0, &bs);
    assert_true(in.order_ok && bs.order_ok && in.n == L0 + 3 && in.tokens == 2 && bs.tokens == 2);
    plp_same(&in, &bs);
    free(lids);
    plp_free(&a); plp_free(&b); plp_free(&c16); plp_free(&pre); plp_free(&am); plp_free(&in); plp_free(&bs);
}

/* prompt_logprobs_from = k: entries k.. only (position 0's unscored one only at k = 0), the same
 * bits as a whole scoring's; past the prompt nothing is scored and the request still ends; the
 * prompt cache supplies the rows before k - 1 (whole chunks), none when every position is scored. */
static void plp_cached(void *u, int positions) { ((plp_rec *)u)->cached = positions; }
static void test_prompt_logprobs_from(void **state) {
    fx *f = *state;
    enum { N = 100 };
    int32_t *ids = text_ids(N, 23);
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.prefill_chunk = 16;
    pm_request r = {.ids = ids, .n_ids = N, .prompt_logprobs = 1, .top_logprobs = 3};
    plp_rec all;
    plp_init(&all, N);
    run_plp(f, &r, &o, 0, &all);
    assert_true(all.order_ok && all.done == 1 && all.n == N);
    const int from[] = {1, 37, N - 1, N, N + 5};
    for (size_t i = 0; i < sizeof from / sizeof from[0]; i++) {
        plp_rec part;
        plp_init(&part, N);
        part.n = from[i] < N ? from[i] : N; /* the first position expected (plp_on_prompt checks the order) */
        int first = part.n;
        r.prompt_logprobs_from = from[i];
        run_plp(f, &r, &o, 0, &part);
        assert_true(part.order_ok && part.done == 1 && part.why == PM_FINISH_LENGTH && part.n == N);
        for (int p = first; p < N; p++) {
            assert_memory_equal(&part.chosen[p], &all.chosen[p], sizeof all.chosen[p]);
            assert_memory_equal(part.top[p], all.top[p], sizeof(pm_logprob) * 3);
        }
        plp_free(&part);
    }
    r.prompt_logprobs_from = -1;
    pm_engine *eng;
    char err[512];
    int64_t need;
    assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
    assert_int_equal(pm_engine_kv_need(eng, &r, &need, err, sizeof err), PM_EINVAL);
    assert_non_null(strstr(err, "prompt_logprobs_from"));
    pm_engine_free(eng);

    /* the prompt cache: its first 64 rows answered first, then the whole prompt scored from 50
     * (rows 49.. computed: 48 from the cache) and from 0 (nothing from it) */
    o.prefix_cache = 64 << 20;
    assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
    pm_request head = {.ids = ids, .n_ids = 64, .max_tokens = 1};
    done_rec d = {0};
    pm_callbacks dcb = {.on_done = rec_done, .user = &d};
    assert_int_equal(pm_engine_submit(eng, &head, &dcb, NULL, err, sizeof err), 0);
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    const int want_cached[2] = {48, 0}, at[2] = {50, 0};
    for (int k = 0; k < 2; k++) {
        plp_rec part;
        plp_init(&part, N);
        part.n = at[k];
        part.cached = -1;
        pm_callbacks cb = {.on_token = plp_on_token, .on_done = plp_on_done, .user = &part, .on_prompt_logprobs = plp_on_prompt,
                           .on_prompt_cached = plp_cached};
        r.prompt_logprobs_from = at[k];
        assert_int_equal(pm_engine_submit(eng, &r, &cb, NULL, err, sizeof err), 0);
        while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
        assert_true(part.order_ok && part.done == 1 && part.n == N);
        assert_int_equal(part.cached, want_cached[k]);
        for (int p = at[k] ? at[k] : 1; p < N; p++) assert_memory_equal(&part.chosen[p], &all.chosen[p], sizeof all.chosen[p]);
        plp_free(&part);
    }
    pm_engine_free(eng);
    plp_free(&all);
    free(ids);
}

/* on_prompt_logits: every scored position's logits, in order, from prompt_logprobs_from on, before
 * the reports; their log-softmax at the prompt's token is the reported log-probability and their
 * largest the first alternative; a prompt past original_max_position gives them too when the
 * engine recomputes beside the steps (that sequence stays in them); a request prefilled before its
 * submission is refused. */
typedef struct logits_rec {
    plp_rec p; /* first: the plp_* callbacks read the same user pointer as a plp_rec */
    const int32_t *ids;
    int first, next, calls, order_ok;
    float *lp;
    int32_t *top;
} logits_rec;
static void rec_prompt_logits(void *u, int pos, const float *x, int V) {
    logits_rec *c = u;
    if (pos != c->next || pos >= c->p.cap || c->p.n != c->first) { /* in order, and all before the first report */
        c->order_ok = 0;
        return;
    }
    double mx = x[0];
    int arg = 0;
    for (int v = 1; v < V; v++)
        if (x[v] > mx) mx = x[v], arg = v;
    double z = 0;
    for (int v = 0; v < V; v++) z += exp((double)x[v] - mx);
    c->lp[pos] = (float)((double)x[c->ids[pos]] - mx - log(z));
    c->top[pos] = arg;
    c->next++;
    c->calls++;
}
static void logits_init(logits_rec *c, const int32_t *ids, int n, int from) {
    plp_init(&c->p, n);
    c->p.n = from;
    c->ids = ids;
    c->first = c->next = from;
    c->calls = 0;
    c->order_ok = 1;
    c->lp = calloc((size_t)n, sizeof *c->lp);
    c->top = calloc((size_t)n, sizeof *c->top);
}
static void logits_check(logits_rec *c, int n, int from) {
    assert_true(c->order_ok && c->p.order_ok && c->calls == n - from && c->p.n == n && c->p.done == 1);
    double worst = 0;
    for (int p = from; p < n; p++) {
        double d = fabs(c->lp[p] - c->p.chosen[p].logprob);
        if (d > worst) worst = d;
        assert_int_equal(c->top[p], c->p.top[p][0].token);
    }
    assert_true(worst < 1e-4);
    plp_free(&c->p);
    free(c->lp);
    free(c->top);
}
static void test_prompt_logits(void **state) {
    fx *f = *state;
    enum { N = 90, FROM = 30 };
    int32_t *ids = text_ids(N, 29);
    pm_request r = {.ids = ids, .n_ids = N, .prompt_logprobs = 1, .top_logprobs = 1, .prompt_logprobs_from = FROM};
    pm_engine *eng;
    char err[512];
    assert_int_equal(pm_engine_new(&eng, f->m, NULL, err, sizeof err), 0);
    logits_rec c;
    logits_init(&c, ids, N, FROM);
    pm_callbacks cb = {.on_token = plp_on_token, .on_done = plp_on_done, .user = &c, .on_prompt_logprobs = plp_on_prompt,
                       .on_prompt_logits = rec_prompt_logits};
    assert_int_equal(pm_engine_submit(eng, &r, &cb, NULL, err, sizeof err), 0);
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    logits_check(&c, N, FROM);
    /* prefilled before its submission: refused, and nothing called */
    pm_encoded *enc = NULL;
    int rc;
    assert_int_equal(pm_engine_encode(eng, &r, &enc, err, sizeof err), 0);
    while ((rc = pm_engine_prefill(eng, enc, 32, err, sizeof err)) == 0) {}
    assert_int_equal(rc, 1);
    logits_init(&c, ids, N, FROM);
    assert_int_equal(pm_engine_submit_encoded(eng, enc, &r, &cb, NULL, err, sizeof err), PM_EINVAL);
    assert_non_null(strstr(err, "on_prompt_logits"));
    pm_encoded_free(enc);
    assert_true(c.calls == 0 && c.p.done == 0);
    plp_free(&c.p);
    free(c.lp);
    free(c.top);
    pm_engine_free(eng);

    /* past original_max_position with the recompute beside: nothing handed out, all given */
    int L0 = f->m->llm.c.orig_max_pos, LN = L0 + 3;
    int32_t *lids = text_ids(LN, 31);
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.recompute_beside = 1;
    assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
    pm_request lr = {.ids = lids, .n_ids = (size_t)LN, .prompt_logprobs = 1, .top_logprobs = 1, .prompt_logprobs_from = L0 - 40};
    logits_init(&c, lids, LN, L0 - 40);
    assert_int_equal(pm_engine_submit(eng, &lr, &cb, NULL, err, sizeof err), 0);
    while (pm_engine_live(eng) > 0) {
        assert_true(pm_engine_step(eng) >= 0);
        pm_encoded *taken = NULL;
        assert_int_equal(pm_engine_take_recompute(eng, &taken, NULL), 0);
    }
    logits_check(&c, LN, L0 - 40);
    pm_engine_free(eng);
    free(lids);
    free(ids);
}

/* The KV budget: a request over it is refused, one that does not fit beside a live sequence gets
 * PM_EBUSY (no callback, nothing reserved) and fits once that sequence has ended; reservations are
 * whole pages of the prompt plus max_tokens and return to 0. */
/* Largest |difference| of two sequences' last logits (engine a's sequence against b's) and, in
 * *rmax, b's largest |logit|. */
static double logits_apart(const pm_engine *a, int64_t ida, const pm_engine *b, int64_t idb, int vocab, double *rmax) {
    const float *la = pm_engine_last_logits(a, ida, NULL, NULL), *lb = pm_engine_last_logits(b, idb, NULL, NULL);
    assert_non_null(la);
    assert_non_null(lb);
    double d = 0;
    *rmax = 0;
    for (int i = 0; i < vocab; i++) {
        d = fmax(d, fabs((double)la[i] - lb[i]));
        *rmax = fmax(*rmax, fabs((double)lb[i]));
    }
    return d;
}

static void test_kv_budget(void **state) {
    fx *f = *state;
    const pm_llm_config *c = &f->m->llm.c;
    int64_t page = (int64_t)pm_kv_bytes(c, 1, 0);
    assert_true(page > 0);
    assert_int_equal((int64_t)pm_kv_bytes(c, PM_KV_PAGE + 1, 0), 2 * page);
    int64_t rows = 4 * ((int64_t)4 * c->hidden + c->vocab); /* a 4-token prompt's rows and the logits */
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.kv_budget = 3 * page + 2 * rows;
    pm_engine *eng;
    char err[512];
    assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
    done_rec d = {0};
    pm_callbacks cb = {.on_done = rec_done, .user = &d};
    pm_request r = {0};
    r.prompt = "<|user|>hello<|end|><|assistant|>"; /* 4 tokens */
    int64_t need = 0, reserved = -1, budget = 0;
    int64_t extra = (rows + page - 1) / page; /* the rows in pages, rounded up */
    r.max_tokens = (int)(4 + extra) * PM_KV_PAGE - 4; /* 4 + extra pages and the rows: over 3 pages and 2 x the rows */
    assert_int_equal(pm_engine_kv_need(eng, &r, &need, err, sizeof err), PM_ELIMIT);
    assert_int_equal(pm_engine_submit(eng, &r, &cb, NULL, err, sizeof err), PM_ELIMIT);
    assert_non_null(strstr(err, "KV budget"));
    r.max_tokens = 200000; /* past the context itself: a status of its own (OpenAI's context_length_exceeded) */
    assert_int_equal(pm_engine_kv_need(eng, &r, &need, err, sizeof err), PM_ECONTEXT);
    assert_non_null(strstr(err, "exceeds the context limit of"));
    assert_string_equal(pm_status_name(PM_ECONTEXT), "context_length_exceeded");
    char version[32]; /* the header's two spellings of the version agree, and the library's is the header's */
    snprintf(version, sizeof version, "%d.%d.%d", PM_VERSION_MAJOR, PM_VERSION_MINOR, PM_VERSION_PATCH);
    assert_string_equal(version, PM_VERSION);
    assert_string_equal(pm_version(), PM_VERSION);
    r.max_tokens = 2 * PM_KV_PAGE - 4; /* exactly 2 pages */
    assert_int_equal(pm_engine_kv_need(eng, &r, &need, err, sizeof err), 0);
    assert_int_equal(need, 2 * page + rows);
    { /* a grammar's parse state counts against the budget: 2 pages beside it are over 3 pages and 2 rows */
        pm_request rg = r;
        rg.format = PM_FORMAT_GRAMMAR;
        rg.grammar = "start: item+\nitem: \"(\" item* \")\" | /[a-z]+/\n";
        assert_true(page + 2 * rows < PM_GRAMMAR_STATE_BYTES);
        assert_int_equal(pm_engine_kv_need(eng, &rg, &need, err, sizeof err), PM_ELIMIT);
        assert_non_null(strstr(err, "and its answer format's automata"));
    }
    int64_t id;
    assert_int_equal(pm_engine_submit(eng, &r, &cb, &id, err, sizeof err), 0);
    pm_engine_kv_usage(eng, &reserved, &budget);
    assert_int_equal(reserved, 2 * page + rows);
    assert_int_equal(budget, 3 * page + 2 * rows);
    pm_request r2 = r; /* 2 more pages: not beside the first */
    assert_int_equal(pm_engine_submit(eng, &r2, &cb, NULL, err, sizeof err), PM_EBUSY);
    assert_non_null(strstr(err, "KV budget is in use"));
    r2.max_tokens = PM_KV_PAGE - 4; /* one page fits */
    int64_t id2;
    assert_int_equal(pm_engine_submit(eng, &r2, &cb, &id2, err, sizeof err), 0);
    pm_engine_kv_usage(eng, &reserved, NULL);
    assert_int_equal(reserved, 3 * page + 2 * rows);
    assert_int_equal(pm_engine_live(eng), 2);
    assert_int_equal(pm_engine_cancel(eng, id), 0);
    pm_engine_step(eng);
    pm_engine_kv_usage(eng, &reserved, NULL);
    assert_int_equal(reserved, page + rows);
    r2.max_tokens = 2 * PM_KV_PAGE - 4; /* now it fits */
    assert_int_equal(pm_engine_submit(eng, &r2, &cb, NULL, err, sizeof err), 0);
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    pm_engine_kv_usage(eng, &reserved, NULL);
    assert_int_equal(reserved, 0);
    assert_int_equal(d.calls, 3); /* the refused and deferred requests never called back */
    pm_engine_free(eng);

    /* default: an automatic budget; < 0: none */
    assert_int_equal(pm_engine_new(&eng, f->m, NULL, err, sizeof err), 0);
    pm_engine_kv_usage(eng, NULL, &budget);
    assert_true(budget >= PM_KV_BUDGET_MIN);
    pm_engine_free(eng);
    o.kv_budget = -1;
    assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
    pm_engine_kv_usage(eng, NULL, &budget);
    assert_true(budget < 0);
    r.max_tokens = 100000;
    assert_int_equal(pm_engine_kv_need(eng, &r, &need, err, sizeof err), 0);
    assert_int_equal(need, (int64_t)pm_kv_bytes(c, 100004, 0) + rows);
    { /* an answer format reserves its automata beside (a pattern its kept masks too), and a grammar the most its parse state may come to */
        pm_request rg = r;
        pm_err pe = {0};
        pm_regex *rx = NULL;
        pm_grammar *g = NULL;
        rg.format = PM_FORMAT_REGEX;
        rg.regex = "[a-z]{3,40}( [0-9]+)?";
        assert_int_equal(pm_regex_compile(rg.regex, strlen(rg.regex), &rx, &pe), 0);
        assert_int_equal(pm_engine_kv_need(eng, &rg, &need, err, sizeof err), 0);
        assert_true(pm_regex_bytes(rx) > (size_t)40 * 3 * 4); /* ~40 states of a row of (at least 3) classes each */
        assert_int_equal(need, (int64_t)pm_kv_bytes(c, 100004, 0) + rows + (int64_t)pm_regex_bytes(rx) + (int64_t)pm_regex_masks_bytes(c->vocab));
        rg.format = PM_FORMAT_GRAMMAR;
        rg.grammar = "start: item+\nitem: \"(\" item* \")\" | /[a-z]+/\n";
        assert_int_equal(pm_grammar_compile(rg.grammar, strlen(rg.grammar), &g, &pe), 0);
        assert_int_equal(pm_engine_kv_need(eng, &rg, &need, err, sizeof err), 0);
        assert_int_equal(need, (int64_t)pm_kv_bytes(c, 100004, 0) + rows + (int64_t)pm_grammar_bytes(g) + PM_GRAMMAR_STATE_BYTES);
        pm_regex_free(rx);
        pm_grammar_free(g);
    }
    pm_engine_free(eng);

    /* --kv-cache bf16: half the pages' bytes reserved, and a request runs through on such caches */
    o.kv_bf16 = 1;
    assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
    assert_int_equal(pm_engine_kv_need(eng, &r, &need, err, sizeof err), 0);
    assert_int_equal(need, (int64_t)pm_kv_bytes(c, 100004, 1) + rows);
    assert_int_equal(2 * pm_kv_bytes(c, 100004, 1), pm_kv_bytes(c, 100004, 0));
    r.max_tokens = 5;
    int calls = d.calls;
    assert_int_equal(pm_engine_submit(eng, &r, &cb, NULL, err, sizeof err), 0);
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    assert_int_equal(d.calls, calls + 1);
    assert_true(d.why != PM_FINISH_ERROR);
    /* the sequence's cache really is bf16: its first logits differ from an fp32 engine's (rounded K/V)
     * but stay near them */
    pm_engine *e32;
    pm_engine_opts o32 = o;
    o32.kv_bf16 = 0;
    assert_int_equal(pm_engine_new(&e32, f->m, &o32, err, sizeof err), 0);
    int64_t id16, id32;
    assert_int_equal(pm_engine_submit(eng, &r, &cb, &id16, err, sizeof err), 0);
    assert_int_equal(pm_engine_submit(e32, &r, &cb, &id32, err, sizeof err), 0);
    assert_true(pm_engine_step(eng) >= 0);
    assert_true(pm_engine_step(e32) >= 0);
    double rmax, dmax = logits_apart(eng, id16, e32, id32, c->vocab, &rmax);
    printf("  first logits, bf16 against fp32 cache: max_abs=%.3g (max|ref| %.3g)\n", dmax, rmax);
    assert_true(dmax > 0.0 && dmax <= 0.1 * rmax);
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    while (pm_engine_live(e32) > 0) assert_true(pm_engine_step(e32) >= 0);
    pm_engine_free(e32);
    pm_engine_free(eng);
}

/* --compute bf16 (pm_load_options.compute_bf16): in effect exactly where the CPU has AVX512-BF16;
 * then a prompt long enough for the GEMM (and an audio clip through the Conformer) gives first
 * logits that differ from the fp32 model's (inputs rounded) but stay near them, and the request
 * runs to its end. */
static void test_compute_bf16(void **state) {
    fx *f = *state;
    char p[2048], err[1024];
    snprintf(p, sizeof p, "%s/phi4mm-tiny/tiny_model", tu_fixtures());
    pm_load_options lo = {.compute_bf16 = 1};
    pm_model *mb;
    assert_int_equal(pm_model_load_opts(&mb, p, &lo, err, sizeof err), 0);
    pm_model_info info;
    pm_model_get_info(mb, &info);
    assert_int_equal(info.compute_bf16, pm_kern_have_avx512bf16());
    pm_model_get_info(f->m, &info);
    assert_int_equal(info.compute_bf16, 0);
    char prompt[4096] = "<|user|>";
    for (int i = 0; i < 30; i++) strcat(prompt, "the quick brown fox jumps over the lazy dog ");
    strcat(prompt, "<|audio_1|>Transcribe.<|end|><|assistant|>");
    pm_request r = {0};
    r.prompt = prompt;
    r.audios = &f->clip;
    r.n_audios = 1;
    r.max_tokens = 4;
    pm_model *ms[2] = {f->m, mb};
    pm_engine *eng[2];
    int64_t id[2];
    for (int k = 0; k < 2; k++) { /* the prompt's chunks (it ends a chunk at its <|end|>), then its first logits */
        assert_int_equal(pm_engine_new(&eng[k], ms[k], NULL, err, sizeof err), 0);
        int64_t need;
        int n_prompt = 0, kv_len = 0;
        assert_int_equal(pm_engine_plan_need(eng[k], &r, &need, &n_prompt, err, sizeof err), 0);
        assert_int_equal(pm_engine_submit(eng[k], &r, NULL, &id[k], err, sizeof err), 0);
        while (kv_len < n_prompt) {
            assert_true(pm_engine_step(eng[k]) > 0);
            assert_non_null(pm_engine_last_logits(eng[k], id[k], NULL, &kv_len));
        }
    }
    double rmax, dmax = logits_apart(eng[1], id[1], eng[0], id[0], f->m->llm.c.vocab, &rmax);
    printf("  first logits, bf16 against fp32 products: max_abs=%.3g (max|ref| %.3g)\n", dmax, rmax);
    if (pm_kern_have_avx512bf16()) assert_true(dmax > 0.0);
    else assert_true(dmax == 0.0);
    assert_true(dmax <= 0.1 * rmax);
    for (int k = 0; k < 2; k++) {
        while (pm_engine_live(eng[k]) > 0) assert_true(pm_engine_step(eng[k]) >= 0);
        pm_engine_free(eng[k]);
    }
    pm_model_free(mb);
}

typedef struct enc_job {
    const pm_engine *eng;
    const pm_request *req;
    pm_encoded *enc;
    int rc, calls; /* calls: of pm_engine_prefill until the prompt was in */
    atomic_int done;
} enc_job;

/* Encodes, then prefills 8 rows at a time (the engine's chunks are 16 rows in this test). */
static void *enc_thread(void *u) {
    enc_job *j = u;
    char err[512];
    omp_set_num_threads(1); /* this thread's regions only: the stepping thread keeps its own count */
    j->rc = pm_engine_encode(j->eng, j->req, &j->enc, err, sizeof err);
    int r = 0;
    while (!j->rc && r == 0) {
        r = pm_engine_prefill(j->eng, j->enc, 8, err, sizeof err);
        j->calls++;
        if (r < 0) j->rc = r;
    }
    atomic_store(&j->done, 1);
    return NULL;
}

static void test_encode_beside_steps(void **state) {
    fx *f = *state;
    int V = f->m->llm.c.vocab;
    run solo = {0}, conc = {0};
    for (run *r = &solo; r; r = r == &solo ? &conc : NULL) audio_and_text(f, r);
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.prefill_chunk = 16; /* several chunks per prompt, in both runs */
    execute_with(f, &solo, (int[]){0}, 1, &o);
    execute_with(f, &solo, (int[]){1}, 1, &o);

    pm_engine *eng;
    char err[512];
    o.max_seqs = 1;
    assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
    rec c[2] = {{eng, &conc, 0, 0}, {eng, &conc, 1, 0}};
    pm_callbacks cb0 = {.on_token = rec_token, .user = &c[0]}, cb1 = {.on_token = rec_token, .user = &c[1]};
    assert_int_equal(pm_engine_submit(eng, &conc.req[1], &cb1, &conc.id[1], err, sizeof err), 0);
    enc_job j = {eng, &conc.req[0], NULL, -1, 0, 0};
    pthread_t th;
    int threads = omp_get_max_threads(), steps = 0;
    omp_set_num_threads(threads > 1 ? threads - 1 : 1);
    assert_int_equal(pthread_create(&th, NULL, enc_thread, &j), 0);
    while (!atomic_load(&j.done) && pm_engine_live(eng) > 0) {
        assert_true(pm_engine_step(eng) >= 0);
        steps++;
    }
    pthread_join(th, NULL);
    assert_int_equal(j.rc, 0);
    assert_non_null(j.enc);
    assert_true(j.calls >= 3); /* 36 prompt rows, 16 per chunk, one chunk per call */
    assert_true(pm_encoded_kv_need(j.enc) > 0);
    /* the engine holds one sequence at most: the encoded request waits, and stays the caller's */
    if (pm_engine_live(eng) > 0) {
        assert_int_equal(pm_engine_submit_encoded(eng, j.enc, &conc.req[0], &cb0, &conc.id[0], err, sizeof err), PM_EBUSY);
        while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    }
    pm_request other = conc.req[0];
    other.max_tokens = STEPS + 1;
    assert_int_equal(pm_engine_submit_encoded(eng, j.enc, &other, &cb0, &conc.id[0], err, sizeof err), PM_EINVAL);
    assert_non_null(strstr(err, "max_tokens"));
    assert_int_equal(pm_engine_submit_encoded(eng, j.enc, &conc.req[0], &cb0, &conc.id[0], err, sizeof err), 0);
    int kv_len = 0; /* admitted with its prompt in the cache: no step prefills it */
    assert_non_null(pm_engine_last_logits(eng, conc.id[0], NULL, &kv_len));
    assert_int_equal(kv_len, 36);
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    omp_set_num_threads(threads);
    int64_t reserved;
    pm_engine_kv_usage(eng, &reserved, NULL);
    assert_int_equal(reserved, 0);
    for (int i = 0; i < 2; i++) assert_memory_equal(solo.logits[i], conc.logits[i], sizeof(float) * (size_t)STEPS * V);
    fprintf(stderr, "steps beside the encoder and prefill: %d\n", steps);

    /* a request the plan refuses is refused by the encoder too, with nothing to free */
    pm_request bad = conc.req[0];
    bad.n_audios = 0;
    pm_encoded *none = (pm_encoded *)&bad;
    assert_int_not_equal(pm_engine_encode(eng, &bad, &none, err, sizeof err), 0);
    assert_null(none);
    assert_int_equal(pm_engine_submit_encoded(eng, NULL, &bad, &cb0, NULL, err, sizeof err), PM_EINVAL);
    pm_engine_free(eng);
    for (int i = 0; i < 2; i++) { free(solo.logits[i]); free(conc.logits[i]); }
}


/* Runs request i of r alone in eng (which may hold a prompt cache), recording its steps' logits;
 * with prefill, encoded and prefilled before admission, as the server's prompt thread does. */
static void run_in(pm_engine *eng, run *r, int i, int prefill) {
    char err[512];
    rec c = {eng, r, i, 0};
    pm_callbacks cb = {.on_token = rec_token, .user = &c, .on_prompt_cached = rec_cached};
    r->cached[i] = -1;
    if (prefill) {
        pm_encoded *enc = NULL;
        int rc;
        assert_int_equal(pm_engine_encode(eng, &r->req[i], &enc, err, sizeof err), 0);
        while ((rc = pm_engine_prefill(eng, enc, 16, err, sizeof err)) == 0) {}
        assert_int_equal(rc, 1);
        assert_int_equal(pm_engine_submit_encoded(eng, enc, &r->req[i], &cb, &r->id[i], err, sizeof err), 0);
    } else {
        assert_int_equal(pm_engine_submit(eng, &r->req[i], &cb, &r->id[i], err, sizeof err), 0);
    }
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    assert_int_equal(c.step, STEPS);
}

/* The prompt cache (pm_engine_opts.prefix_cache): a prompt that begins as an ended one did starts
 * past its whole prefill chunks, inline or prefilled beside the steps, and every step's logits are
 * an engine's without the cache, bit for bit; the same clip reuses its rows, another adapter or
 * another clip does not; a scored prompt computes every position. */
static void test_prefix_cache(void **state) {
    fx *f = *state;
    int V = f->m->llm.c.vocab;
    pm_engine_opts o, plain;
    pm_engine_opts_default(&o);
    o.prefill_chunk = 16;
    plain = o;
    o.prefix_cache = (int64_t)256 << 20;
    int32_t *a = text_ids(70, 21), *b = text_ids(75, 22);
    memcpy(b, a, sizeof(int32_t) * 50); /* 50 ids in common: 48 reusable in chunks of 16 */
    b[50] = a[50] == 1000 ? 1001 : 1000;
    static const char *said = "<|user|>Please listen to the following recording very carefully, then write down every word of it, in "
                              "order, and nothing else at all, no comments and no notes. ";
    char aud[512], txt[512];
    snprintf(aud, sizeof aud, "%s<|audio_1|>Now transcribe.<|end|><|assistant|>", said);
    snprintf(txt, sizeof txt, "%sThere is no recording.<|end|><|assistant|>", said);
    run ref = {0}, got = {0};
    for (run *r = &ref; r; r = r == &ref ? &got : NULL) {
        pm_request ra = {.ids = a, .n_ids = 70, .max_tokens = STEPS}, rb = {.ids = b, .n_ids = 75, .max_tokens = STEPS};
        r->req[0] = ra;
        r->req[1] = rb;
        for (int i = 0; i < 2; i++) r->logits[i] = calloc((size_t)STEPS * V, sizeof(float));
    }
    char err[512];
    pm_engine *eng, *eng0;
    assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
    assert_int_equal(pm_engine_new(&eng0, f->m, &plain, err, sizeof err), 0);
    pm_prefix_stats st;
    run_in(eng0, &ref, 1, 0);
    run_in(eng, &got, 0, 0);
    pm_engine_prefix_stats(eng, &st);
    assert_true(st.lookups == 1 && st.hits == 0 && st.entries == 1 && st.bytes > 0 && st.bytes <= st.cap);
    run_in(eng, &got, 1, 0); /* inline: 48 positions from the cache */
    pm_engine_prefix_stats(eng, &st);
    assert_true(st.hits == 1 && st.reused == 48);
    assert_memory_equal(ref.logits[1], got.logits[1], sizeof(float) * (size_t)STEPS * V);
    run_in(eng, &got, 1, 1); /* prefilled beside the steps: the same again */
    pm_engine_prefix_stats(eng, &st);
    assert_true(st.hits == 2 && st.reused == 48 + 64); /* b's own 64 positions were kept meanwhile */
    assert_memory_equal(ref.logits[1], got.logits[1], sizeof(float) * (size_t)STEPS * V);
    pm_engine_prefix_stats(eng0, &st);
    assert_true(st.lookups == 0 && st.cap == 0);
    /* a live sequence's prompt is offered once prefilled: the same prompt submitted while it still
     * decodes (a request's next choice) starts past it */
    {
        pm_engine *e2;
        assert_int_equal(pm_engine_new(&e2, f->m, &o, err, sizeof err), 0);
        run two = {0};
        two.req[0] = got.req[1];
        two.req[1] = got.req[1];
        for (int i = 0; i < 2; i++) two.logits[i] = calloc((size_t)STEPS * V, sizeof(float));
        rec c0 = {e2, &two, 0, 0}, c1 = {e2, &two, 1, 0};
        pm_callbacks cb0 = {.on_token = rec_token, .user = &c0}, cb1 = {.on_token = rec_token, .user = &c1};
        assert_int_equal(pm_engine_submit(e2, &two.req[0], &cb0, &two.id[0], err, sizeof err), 0);
        while (c0.step == 0) assert_true(pm_engine_step(e2) > 0); /* its prompt's chunks, and its first token */
        assert_int_equal(pm_engine_submit(e2, &two.req[1], &cb1, &two.id[1], err, sizeof err), 0);
        pm_engine_prefix_stats(e2, &st);
        assert_true(st.hits == 1 && st.reused == 64 && pm_engine_live(e2) == 2);
        while (pm_engine_live(e2) > 0) assert_true(pm_engine_step(e2) >= 0);
        for (int i = 0; i < 2; i++) assert_memory_equal(ref.logits[1], two.logits[i], sizeof(float) * (size_t)STEPS * V);
        pm_engine_prefix_stats(e2, &st);
        assert_int_equal(st.entries, 1); /* the ended ones were held already */
        pm_engine_free(e2);
        for (int i = 0; i < 2; i++) free(two.logits[i]);
    }

    /* a cache salt: a salted prompt reuses neither the unsalted entries nor another salt's, and its
     * own only under the same salt (the same bits again) */
    {
        pm_engine *e2;
        assert_int_equal(pm_engine_new(&e2, f->m, &o, err, sizeof err), 0);
        run_in(e2, &got, 0, 0);
        got.req[1].cache_salt = "tenant-a";
        run_in(e2, &got, 1, 0);
        pm_engine_prefix_stats(e2, &st);
        assert_true(st.lookups == 2 && st.hits == 0 && st.entries == 2);
        got.req[1].cache_salt = "tenant-b";
        run_in(e2, &got, 1, 0);
        pm_engine_prefix_stats(e2, &st);
        assert_true(st.hits == 0 && st.entries == 3);
        got.req[1].cache_salt = "tenant-a";
        run_in(e2, &got, 1, 1);
        pm_engine_prefix_stats(e2, &st);
        assert_true(st.hits == 1 && st.reused == 64);
        assert_memory_equal(ref.logits[1], got.logits[1], sizeof(float) * (size_t)STEPS * V);
        char big[PM_MAX_CACHE_SALT + 2];
        memset(big, 's', sizeof big - 1);
        big[sizeof big - 1] = 0;
        got.req[1].cache_salt = big;
        int64_t id;
        pm_callbacks none = {0};
        assert_int_equal(pm_engine_submit(e2, &got.req[1], &none, &id, err, sizeof err), PM_EINVAL);
        assert_non_null(strstr(err, "cache_salt"));
        got.req[1].cache_salt = NULL;
        pm_engine_free(e2);
    }

    /* media: the same clip twice reuses its rows too; a text prompt with the same words before the
     * clip does not (no adapter against the speech one) */
    run aref = {0}, agot = {0};
    for (run *r = &aref; r; r = r == &aref ? &agot : NULL) {
        pm_request ra = {.prompt = aud, .audios = &f->clip, .n_audios = 1, .max_tokens = STEPS}, rt = {.prompt = txt, .max_tokens = STEPS};
        r->req[0] = ra;
        r->req[1] = rt;
        for (int i = 0; i < 2; i++) r->logits[i] = calloc((size_t)STEPS * V, sizeof(float));
    }
    run_in(eng0, &aref, 0, 0);
    run_in(eng0, &aref, 1, 0);
    pm_engine_prefix_stats(eng, &st);
    int64_t hits = st.hits, reused = st.reused;
    run_in(eng, &agot, 0, 0);
    run_in(eng, &agot, 1, 0);
    pm_engine_prefix_stats(eng, &st);
    assert_true(st.hits == hits && st.reused == reused); /* the text prompt met the speech one's: no reuse */
    assert_true(st.media_lookups == 1 && st.media_hits == 0 && st.media_bytes > 0);
    run_in(eng, &agot, 0, 1);
    pm_engine_prefix_stats(eng, &st);
    assert_true(st.hits == hits + 1 && st.reused > reused + 16);
    assert_true(st.media_lookups == 2 && st.media_hits == 1); /* the clip's rows came from the media cache */
    for (int i = 0; i < 2; i++) assert_memory_equal(aref.logits[i], agot.logits[i], sizeof(float) * (size_t)STEPS * V);
    /* another clip under the same words: reuse stops where the rows differ */
    pm_audio_in other = f->clip;
    double *half = malloc(sizeof(double) * f->clip.n_samples);
    for (size_t k = 0; k < f->clip.n_samples; k++) half[k] = 0.5 * f->clip.samples[k];
    other.samples = half;
    agot.req[0].audios = aref.req[0].audios = &other;
    run_in(eng0, &aref, 0, 0);
    reused = st.reused;
    run_in(eng, &agot, 0, 0);
    pm_engine_prefix_stats(eng, &st);
    assert_true(st.reused - reused < 48); /* at most the words before the clip */
    assert_true(st.media_lookups == 3 && st.media_hits == 1);
    assert_memory_equal(aref.logits[0], agot.logits[0], sizeof(float) * (size_t)STEPS * V);
    free(half);
    /* an image twice: its encoder output kept, the whole prompt but its last chunk reused; the
     * second one with a clip too (the vision adapter for both: the image's rows match, the clip's
     * rows start where the first prompt ended) */
    char ip[2048], ierr[256];
    snprintf(ip, sizeof ip, "%s/phi4mm-tiny/inputs/image.png", tu_fixtures());
    size_t ilen = 0;
    uint8_t *ibytes = tu_slurp(ip, &ilen);
    assert_non_null(ibytes);
    pm_image_in img;
    assert_int_equal(pm_image_decode(ibytes, ilen, ip, 0, &img, ierr, sizeof ierr), 0);
    free(ibytes);
    run iref = {0}, igot = {0};
    for (run *r = &iref; r; r = r == &iref ? &igot : NULL) {
        pm_request ri = {.prompt = "<|user|><|image_1|>Describe the image.<|end|><|assistant|>", .images = &img, .n_images = 1,
                         .max_tokens = STEPS};
        pm_request rm = {.prompt = "<|user|><|image_1|>Describe the image.<|audio_1|><|end|><|assistant|>", .images = &img, .n_images = 1,
                         .audios = &f->clip, .n_audios = 1, .max_tokens = STEPS};
        r->req[0] = ri;
        r->req[1] = rm;
        for (int i = 0; i < 2; i++) r->logits[i] = calloc((size_t)STEPS * V, sizeof(float));
    }
    run_in(eng0, &iref, 0, 0);
    run_in(eng0, &iref, 1, 0);
    pm_engine_prefix_stats(eng, &st);
    int64_t mh = st.media_hits;
    reused = st.reused;
    run_in(eng, &igot, 0, 0);
    run_in(eng, &igot, 0, 1);
    run_in(eng, &igot, 1, 1);
    pm_engine_prefix_stats(eng, &st);
    for (int i = 0; i < 2; i++) assert_memory_equal(iref.logits[i], igot.logits[i], sizeof(float) * (size_t)STEPS * V);
    assert_true(st.media_hits == mh + 2 && st.reused - reused > 2 * 16);
    /* salted, the same image is encoded again (a miss) and then found under that salt */
    igot.req[0].cache_salt = "tenant-a";
    int64_t ml = st.media_lookups;
    run_in(eng, &igot, 0, 0);
    pm_engine_prefix_stats(eng, &st);
    assert_true(st.media_lookups == ml + 1 && st.media_hits == mh + 2);
    run_in(eng, &igot, 0, 0);
    pm_engine_prefix_stats(eng, &st);
    assert_true(st.media_lookups == ml + 2 && st.media_hits == mh + 3);
    assert_memory_equal(iref.logits[0], igot.logits[0], sizeof(float) * (size_t)STEPS * V);
    pm_image_in_free(&img);
    for (int i = 0; i < 2; i++) { free(iref.logits[i]); free(igot.logits[i]); }
    /* a scored prompt is not looked up (prefilled beside the steps: scored as its chunks run) */
    int64_t lookups = st.lookups;
    got.req[1].prompt_logprobs = 1;
    run_in(eng, &got, 1, 1);
    pm_engine_prefix_stats(eng, &st);
    assert_int_equal(st.lookups, lookups);
    int64_t reserved;
    pm_engine_kv_usage(eng, &reserved, NULL);
    assert_int_equal(reserved, 0);
    pm_engine_free(eng);
    pm_engine_free(eng0);
    for (int i = 0; i < 2; i++) { free(ref.logits[i]); free(got.logits[i]); free(aref.logits[i]); free(agot.logits[i]); }
    free(a);
    free(b);
}

/* Prefill chunks end at a message's <|end|> (once an eighth of prefill_chunk long), so that a
 * conversation's next turn reuses the previous prompt up to its last <|end|>, and a request with
 * the same system message reuses that message, wherever the 512-row boundaries fall; the tokens
 * stay those of an engine without the cache, bit for bit. */
static void test_prefix_cache_messages(void **state) {
    fx *f = *state;
    int V = f->m->llm.c.vocab;
    int32_t end = pm_model_token_id(f->m, "<|end|>");
    assert_true(end > 0);
    pm_engine_opts o, plain;
    pm_engine_opts_default(&o);
    o.prefill_chunk = 32; /* chunks end early at <|end|> from 4 rows on */
    plain = o;
    o.prefix_cache = (int64_t)256 << 20;
    static const char *sys = "<|system|>You are a careful assistant who answers in one short sentence and never adds anything else.<|end|>";
    char p1[1024], p2[2048], p3[1024];
    snprintf(p1, sizeof p1, "%s<|user|>Name the largest planet of the solar system, please.<|end|><|assistant|>", sys);
    snprintf(p2, sizeof p2, "%s<|user|>Name the largest planet of the solar system, please.<|end|><|assistant|>Jupiter is the largest."
             "<|end|><|user|>And the smallest one?<|end|><|assistant|>", sys);
    snprintf(p3, sizeof p3, "%s<|user|>What is the boiling point of water at sea level?<|end|><|assistant|>", sys);
    const char *prompts[3] = {p1, p2, p3};
    run ref = {0}, got = {0};
    for (run *r = &ref; r; r = r == &ref ? &got : NULL)
        for (int i = 0; i < 2; i++) r->logits[i] = calloc((size_t)STEPS * V, sizeof(float));
    char err[512];
    pm_engine *eng, *eng0;
    assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
    assert_int_equal(pm_engine_new(&eng0, f->m, &plain, err, sizeof err), 0);
    /* where each prompt's messages end: p2 reuses p1 up to its last <|end|>, p3 up to the system message's */
    int last_end[3] = {0}, first_end[3] = {0};
    for (int k = 0; k < 3; k++) {
        pm_request q = {.prompt = prompts[k], .max_tokens = STEPS};
        int32_t *ids;
        size_t n;
        assert_int_equal(pm_engine_prompt_ids(eng, &q, &ids, &n, err, sizeof err), 0);
        for (size_t i = 0; i < n; i++)
            if (ids[i] == end) {
                if (!first_end[k]) first_end[k] = (int)i + 1;
                last_end[k] = (int)i + 1;
            }
        assert_true(first_end[k] >= 4 && first_end[k] < 32 && n > 32); /* the system message a chunk of its own; several chunks */
        free(ids);
    }
    pm_prefix_stats st;
    for (int k = 0; k < 3; k++) {
        pm_request q = {.prompt = prompts[k], .max_tokens = STEPS};
        ref.req[k % 2] = got.req[k % 2] = q;
        pm_engine_prefix_stats(eng, &st);
        int64_t reused = st.reused;
        run_in(eng0, &ref, k % 2, 0);
        run_in(eng, &got, k % 2, k == 2);
        assert_memory_equal(ref.logits[k % 2], got.logits[k % 2], sizeof(float) * (size_t)STEPS * V);
        pm_engine_prefix_stats(eng, &st);
        int want = k == 0 ? 0 : k == 1 ? last_end[0] : first_end[0];
        assert_int_equal(st.reused - reused, want);
        assert_int_equal(got.cached[k % 2], want); /* what on_prompt_cached tells the request */
        assert_int_equal(ref.cached[k % 2], 0);
    }
    pm_engine_free(eng);
    pm_engine_free(eng0);
    for (int i = 0; i < 2; i++) { free(ref.logits[i]); free(got.logits[i]); }
}

/* One request encoded and prefilled before admission (rows per pm_engine_prefill call: `rows`). */
static void execute_prefilled(fx *f, run *r, int i, int rows) {
    pm_engine *eng;
    pm_encoded *enc = NULL;
    char err[512];
    assert_int_equal(pm_engine_new(&eng, f->m, NULL, err, sizeof err), 0);
    assert_int_equal(pm_engine_encode(eng, &r->req[i], &enc, err, sizeof err), 0);
    int rc;
    while ((rc = pm_engine_prefill(eng, enc, rows, err, sizeof err)) == 0) {}
    assert_int_equal(rc, 1);
    rec c = {eng, r, i, 0};
    pm_callbacks cb = {.on_token = rec_token, .user = &c};
    assert_int_equal(pm_engine_submit_encoded(eng, enc, &r->req[i], &cb, &r->id[i], err, sizeof err), 0);
    while (pm_engine_live(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
    pm_engine_free(eng);
}

/* Prefilled before admission, a prompt past original_max_position starts on the long factors and
 * one just under it switches (and recomputes) during decode, exactly as when the engine prefills. */
static void test_prefill_longrope(void **state) {
    fx *f = *state;
    int V = f->m->llm.c.vocab, L0 = f->m->llm.c.orig_max_pos, len[2] = {L0 + 3, L0 - 2};
    run eng_run = {0}, pre = {0};
    int32_t *ids[2] = {text_ids(len[0], 11), text_ids(len[1], 13)};
    for (run *r = &eng_run; r; r = r == &eng_run ? &pre : NULL)
        for (int i = 0; i < 2; i++) {
            r->req[i].ids = ids[i];
            r->req[i].n_ids = (size_t)len[i];
            r->req[i].max_tokens = STEPS;
            r->logits[i] = calloc((size_t)STEPS * V, sizeof(float));
        }
    for (int i = 0; i < 2; i++) {
        execute(f, &eng_run, (int[]){i}, 1);
        execute_prefilled(f, &pre, i, 1000);
        for (int s = 0; s < STEPS; s++) assert_int_equal(pre.rope_long[i][s], eng_run.rope_long[i][s]);
        assert_memory_equal(eng_run.logits[i], pre.logits[i], sizeof(float) * (size_t)STEPS * V);
    }
    assert_int_equal(pre.rope_long[0][0], 1);
    assert_int_equal(pre.rope_long[1][0], 0);
    assert_int_equal(pre.rope_long[1][STEPS - 1], 1);
    for (int i = 0; i < 2; i++) { free(eng_run.logits[i]); free(pre.logits[i]); free(ids[i]); }
}

/* ---- LongRoPE recompute beside the steps (opts.recompute_beside, as the server runs it) ---- */

typedef struct trec {
    pm_engine *eng;
    int64_t id;
    int n;
    int32_t toks[64];
    float *logits; /* [STEPS][vocab], or NULL */
    int rope_long[STEPS];
} trec;

static int trec_token(void *u, int32_t tok, const char *text, size_t len) {
    (void)text; (void)len;
    trec *t = u;
    if (t->n < 64) t->toks[t->n] = tok;
    if (t->logits && t->n < STEPS) {
        const float *lg = pm_engine_last_logits(t->eng, t->id, &t->rope_long[t->n], NULL);
        assert_non_null(lg);
        memcpy(t->logits + (size_t)t->n * 200064, lg, sizeof(float) * 200064);
    }
    t->n++;
    return 0;
}

/* A sequence crossing original_max_position (its prompt L0 - 2, the third decode crosses) beside a
 * short one with 40 tokens to go. beside: the recompute is taken out, held for two steps (the
 * short one keeps decoding, the long one waits), given back once unfinished (`partial`: it must be
 * taken again, from scratch), then prefilled 300 rows per call and resumed. */
static void run_crossing(fx *f, int beside, int partial, trec t[2]) {
    int L0 = f->m->llm.c.orig_max_pos;
    int32_t *a = text_ids(L0 - 2, 7), *b = text_ids(20, 9);
    pm_request r[2] = {{0}, {0}};
    r[0].ids = a, r[0].n_ids = (size_t)(L0 - 2), r[0].max_tokens = STEPS;
    r[1].ids = b, r[1].n_ids = 20, r[1].max_tokens = 40;
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.recompute_beside = beside;
    pm_engine *eng;
    char err[512];
    assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
    for (int i = 0; i < 2; i++) {
        t[i].eng = eng;
        pm_callbacks cb = {.on_token = trec_token, .user = &t[i]};
        assert_int_equal(pm_engine_submit(eng, &r[i], &cb, &t[i].id, err, sizeof err), 0);
    }
    int taken = 0;
    while (pm_engine_live(eng) > 0) {
        assert_true(pm_engine_step(eng) >= 0);
        pm_encoded *enc = NULL;
        int64_t sid = 0;
        int k = pm_engine_take_recompute(eng, &enc, &sid);
        assert_true(beside ? k >= 0 : k == 0);
        if (k != 1) continue;
        taken++;
        assert_int_equal(sid, t[0].id);
        assert_int_equal(pm_engine_live(eng), 2);
        assert_int_equal(pm_engine_stepping(eng), 1);
        pm_encoded *again = NULL;
        assert_int_equal(pm_engine_take_recompute(eng, &again, NULL), 0); /* away: not handed out twice */
        /* a recompute is no request */
        assert_int_equal(pm_engine_submit_encoded(eng, enc, &r[0], NULL, NULL, err, sizeof err), PM_EINVAL);
        int n0 = t[0].n, n1 = t[1].n;
        for (int s = 0; s < 2; s++) assert_true(pm_engine_step(eng) >= 0);
        assert_int_equal(t[0].n, n0);     /* parked */
        assert_int_equal(t[1].n, n1 + 2); /* the other one decodes meanwhile */
        int rc = pm_engine_prefill(eng, enc, 300, err, sizeof err);
        assert_int_equal(rc, 0);
        if (partial && taken == 1) { /* unfinished: it waits to be taken again */
            assert_int_equal(pm_engine_resume(eng, enc, NULL), 0);
            assert_int_equal(pm_engine_stepping(eng), 1);
            continue;
        }
        while ((rc = pm_engine_prefill(eng, enc, 300, err, sizeof err)) == 0) {}
        assert_int_equal(rc, 1);
        assert_int_equal(pm_engine_resume(eng, enc, NULL), 0);
        assert_int_equal(pm_engine_stepping(eng), 2);
    }
    assert_int_equal(taken, beside ? 1 + partial : 0);
    int64_t reserved;
    pm_engine_kv_usage(eng, &reserved, NULL);
    assert_int_equal(reserved, 0);
    pm_engine_free(eng);
    free(a);
    free(b);
}

static void test_recompute_beside_steps(void **state) {
    fx *f = *state;
    size_t V = (size_t)f->m->llm.c.vocab;
    trec in[2] = {{0}}, bs[2] = {{0}}, pa[2] = {{0}};
    in[0].logits = calloc(STEPS * V, sizeof(float));
    bs[0].logits = calloc(STEPS * V, sizeof(float));
    pa[0].logits = calloc(STEPS * V, sizeof(float));
    run_crossing(f, 0, 0, in);
    run_crossing(f, 1, 0, bs);
    run_crossing(f, 1, 1, pa);
    assert_int_equal(in[0].n, STEPS);
    assert_int_equal(in[1].n, 40);
    int switched = 0;
    for (int s = 0; s < STEPS; s++) switched |= in[0].rope_long[s];
    assert_true(switched);
    for (trec *t = bs; t; t = t == bs ? pa : NULL) {
        for (int i = 0; i < 2; i++) {
            assert_int_equal(t[i].n, in[i].n);
            assert_memory_equal(t[i].toks, in[i].toks, sizeof(int32_t) * (size_t)in[i].n);
        }
        assert_memory_equal(t[0].rope_long, in[0].rope_long, sizeof in[0].rope_long);
        assert_memory_equal(t[0].logits, in[0].logits, sizeof(float) * STEPS * V);
    }
    free(in[0].logits); free(bs[0].logits); free(pa[0].logits);
}

/* The parked sequence's client leaves: it ends cancelled at the next step, its recompute comes back
 * to nobody, and nothing stays reserved; an error from the recompute ends its sequence with it. */
static void test_recompute_cancel_and_error(void **state) {
    fx *f = *state;
    int L0 = f->m->llm.c.orig_max_pos;
    int32_t *a = text_ids(L0, 5);
    pm_request r = {0};
    r.ids = a, r.n_ids = (size_t)L0, r.max_tokens = 4;
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.recompute_beside = 1;
    char err[512];
    for (int how = 0; how < 2; how++) {
        pm_engine *eng;
        assert_int_equal(pm_engine_new(&eng, f->m, &o, err, sizeof err), 0);
        done_rec d = {0};
        pm_callbacks cb = {.on_done = rec_done, .user = &d};
        int64_t id, sid = 0;
        assert_int_equal(pm_engine_submit(eng, &r, &cb, &id, err, sizeof err), 0);
        pm_encoded *enc = NULL;
        while (pm_engine_stepping(eng) > 0) assert_true(pm_engine_step(eng) >= 0);
        assert_int_equal(pm_engine_take_recompute(eng, &enc, &sid), 1);
        assert_int_equal(sid, id);
        if (how == 0) {
            assert_int_equal(pm_engine_cancel(eng, id), 0);
            assert_true(pm_engine_step(eng) >= 0);
            assert_int_equal(pm_engine_live(eng), 0);
            assert_int_equal(d.why, PM_FINISH_CANCELLED);
            assert_int_equal(pm_engine_resume(eng, enc, NULL), 0); /* nobody to give it to */
        } else {
            assert_int_equal(pm_engine_resume(eng, enc, "out of memory"), 0);
            assert_int_equal(pm_engine_live(eng), 0);
            assert_int_equal(d.why, PM_FINISH_ERROR);
        }
        assert_int_equal(d.calls, 1);
        int64_t reserved;
        pm_engine_kv_usage(eng, &reserved, NULL);
        assert_int_equal(reserved, 0);
        assert_int_equal(pm_engine_resume(eng, NULL, NULL), PM_EINVAL);
        pm_engine_free(eng);
    }
    free(a);
}

/* The encoders ask pm_request.should_stop between their blocks: a yes ends the encode (or the
 * submit) with PM_ECANCELED, nothing left behind; a no changes nothing. */
static int stop_after(void *u) {
    int *n = u;
    return --*n < 0;
}

static void test_encode_stop_hook(void **state) {
    fx *f = *state;
    pm_engine *eng;
    char err[512];
    assert_int_equal(pm_engine_new(&eng, f->m, NULL, err, sizeof err), 0);
    run r = {0};
    audio_and_text(f, &r);
    pm_request a = r.req[0];
    int left = 2;
    a.should_stop = stop_after;
    a.stop_user = &left;
    pm_encoded *enc = NULL;
    assert_int_equal(pm_engine_encode(eng, &a, &enc, err, sizeof err), PM_ECANCELED);
    assert_null(enc);
    assert_non_null(strstr(err, "Conformer"));
    assert_int_equal(left, -1); /* asked three times: two blocks ran */
    left = 1000;
    assert_int_equal(pm_engine_encode(eng, &a, &enc, err, sizeof err), 0);
    assert_true(left < 1000);
    pm_encoded_free(enc);
    enc = NULL;

    enum { W = 96, H = 80 };
    static uint8_t rgb[W * H * 3];
    for (int i = 0; i < W * H * 3; i++) rgb[i] = (uint8_t)(i * 7);
    pm_image_in im = {rgb, W, H};
    pm_request v = {0};
    v.prompt = "<|user|><|image_1|>Describe.<|end|><|assistant|>";
    v.images = &im;
    v.n_images = 1;
    v.max_tokens = 2;
    v.should_stop = stop_after;
    v.stop_user = &left;
    left = 1;
    assert_int_equal(pm_engine_encode(eng, &v, &enc, err, sizeof err), PM_ECANCELED);
    assert_null(enc);
    assert_non_null(strstr(err, "SigLIP"));

    done_rec d = {0};
    pm_callbacks cb = {.on_done = rec_done, .user = &d};
    left = 0;
    assert_int_equal(pm_engine_submit(eng, &a, &cb, NULL, err, sizeof err), PM_ECANCELED);
    assert_int_equal(pm_engine_live(eng), 0);
    assert_int_equal(d.calls, 0);
    int64_t reserved;
    pm_engine_kv_usage(eng, &reserved, NULL);
    assert_int_equal(reserved, 0);
    pm_engine_free(eng);
    for (int i = 0; i < 2; i++) free(r.logits[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adapter_policy),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_json_mode),
        cmocka_unit_test(test_json_lazy),
        cmocka_unit_test(test_guided),
        cmocka_unit_test(test_draft),
        cmocka_unit_test(test_prediction),
        cmocka_unit_test(test_min_tokens),
        cmocka_unit_test(test_stops),
        cmocka_unit_test(test_prompt_logprobs),
        cmocka_unit_test(test_prompt_logprobs_from),
        cmocka_unit_test(test_prompt_logits),
        cmocka_unit_test(test_adapter_isolation_in_batch),
        cmocka_unit_test(test_longrope_per_sequence_in_batch),
        cmocka_unit_test(test_cancel_and_bad_requests),
        cmocka_unit_test(test_kv_budget),
        cmocka_unit_test(test_compute_bf16),
        cmocka_unit_test(test_encode_beside_steps),
        cmocka_unit_test(test_prefill_longrope),
        cmocka_unit_test(test_recompute_beside_steps),
        cmocka_unit_test(test_recompute_cancel_and_error),
        cmocka_unit_test(test_encode_stop_hook),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_prefix_cache_messages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
