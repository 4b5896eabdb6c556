/* bench_draft.c — prompt-lookup drafting's rows (pm_engine_opts.draft_tokens): the decode time of
 * the same request in an engine with --draft 4 and one without, alternating in this process (three
 * pairs, median ratio), on two answers: one pushed to repeat a token of the prompt (a logit bias:
 * text that repeats, the case drafting is for; the random-weight model's own greedy answer repeats
 * one token too), and one sampled at temperature 1 (text that does not repeat: what drafting costs
 * when it finds nothing to draft). The tokens must be the same (drafting is exact). What a turned-
 * down draft costs is the batch rows' business: "batch 2 / batch 1 interleaved" (--batches 1,2).
 * Predicted outputs (pm_request.prediction): the sampled answer again, given its own text as the
 * prediction, against the same request without one, both in the engine without --draft. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "phi4mm.h"

enum { PROMPT = 160, ANSWER = 33, PAIRS = 3 };

typedef struct decode_rec {
    double t_first, t_last;
    int32_t tok[ANSWER + 1];
    int n;
    int pred_drafted, pred_taken;
} decode_rec;

static void on_pred(void *u, int drafted, int taken) {
    decode_rec *d = u;
    d->pred_drafted = drafted;
    d->pred_taken = taken;
}

static int on_tok(void *u, int32_t tok, const char *text, size_t len) {
    (void)text;
    (void)len;
    decode_rec *d = u;
    double t = bench_now();
    if (d->n == 0) d->t_first = t;
    d->t_last = t;
    if (d->n <= ANSWER) d->tok[d->n++] = tok;
    return 0;
}

/* Seconds from the first token to the last of r in eng (the decode alone), or < 0. */
static double decode_seconds(pm_engine *eng, const pm_request *r, decode_rec *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    pm_callbacks cb = {.on_token = on_tok, .user = d, .on_prediction = on_pred};
    if (pm_engine_submit(eng, r, &cb, NULL, err, errlen)) return -1;
    while (pm_engine_live(eng) > 0)
        if (pm_engine_step(eng) < 0) return -1;
    return d->n > 1 ? d->t_last - d->t_first : -1;
}

/* PAIRS alternating runs: r0 in e0 (without), then r1 in e1 (with). */
typedef struct pairs_rec {
    double ratio, t_with, t_without; /* the median of t_without / t_with; the mean times */
    int same;                        /* the same tokens every time (drafting must be exact) */
    int pred_drafted, pred_taken;    /* the runs with: the prediction's tokens drafted and taken, summed */
} pairs_rec;

static int alternate(pm_engine *e0, const pm_request *r0, pm_engine *e1, const pm_request *r1, pairs_rec *p, char *err, size_t errlen) {
    double ratio[PAIRS];
    memset(p, 0, sizeof *p);
    p->same = 1;
    for (int k = 0; k < PAIRS; k++) {
        decode_rec dw, dn;
        double tn = decode_seconds(e0, r0, &dn, err, errlen), tw = tn < 0 ? -1 : decode_seconds(e1, r1, &dw, err, errlen);
        if (tn < 0 || tw < 0) return PM_ESTATE;
        p->same &= dn.n == dw.n && !memcmp(dn.tok, dw.tok, sizeof(int32_t) * (size_t)dn.n);
        ratio[k] = tn / tw;
        p->t_with += tw / PAIRS;
        p->t_without += tn / PAIRS;
        p->pred_drafted += dw.pred_drafted;
        p->pred_taken += dw.pred_taken;
    }
    p->ratio = bench_median(ratio, PAIRS);
    return 0;
}

/* "prediction / none": the sampled answer's own text as its prediction (eng: no --draft). */
static int bench_prediction(bench_ctx *b, pm_engine *eng, const int32_t *ids, char *err, size_t errlen) {
    pm_request r = {.ids = ids, .n_ids = PROMPT, .max_tokens = ANSWER};
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 5;
    bench_progress("decode batch 1 with a prediction (the sampled answer's own text)");
    decode_rec first;
    if (decode_seconds(eng, &r, &first, err, errlen) < 0) return PM_ESTATE;
    char *text = calloc(1, (size_t)first.n * 256 + 1);
    if (!text) return PM_ENOMEM;
    for (int k = 0, at = 0; k < first.n; k++) { /* the tokens' bytes: the text the model wrote */
        size_t len = 0;
        const char *t = pm_model_token_bytes(b->m, first.tok[k], &len);
        if (t && len < 256) memcpy(text + at, t, len), at += (int)len;
    }
    pm_request rp = r;
    rp.prediction = text;
    pairs_rec p;
    int rc = alternate(eng, &r, eng, &rp, &p, err, errlen);
    free(text);
    if (rc) return rc;
    bench_row(b, "decode", "prediction / none, a sampled answer", p.ratio, "x", -1, -1,
              json_pack("{s:f, s:f, s:i, s:i, s:b}", "with_s", p.t_with, "without_s", p.t_without, "drafted", p.pred_drafted, "taken",
                        p.pred_taken, "same_tokens", p.same),
              "batch 1, %d tokens sampled at T 1 after a %d-token prompt, given their own text as the prediction (no --draft): decode "
              "%.2f s with it against %.2f s without (median of %d alternating pairs); %d drafted from it, %d taken; tokens %s",
              ANSWER - 1, PROMPT, p.t_with, p.t_without, PAIRS, p.pred_drafted, p.pred_taken,
              p.same ? "the same" : "DIFFER (a bug: drafting must be exact)");
    return p.same ? 0 : PM_ESTATE;
}

int bench_draft(bench_ctx *b) {
    char err[1024] = "";
    int32_t ids[PROMPT];
    uint32_t seed = 777u;
    for (int i = 0; i < PROMPT; i++) { /* a 16-token phrase, ten times */
        if (i < 16) {
            seed = seed * 1103515245u + 12345u;
            ids[i] = (int32_t)(1000 + (seed >> 8) % 150000u);
        } else {
            ids[i] = ids[i % 16];
        }
    }
    pm_engine_opts o, plain;
    pm_engine_opts_default(&o);
    o.prefill_chunk = b->o.prefill_chunk;
    plain = o;
    o.draft_tokens = 4;
    pm_engine *eng = NULL, *eng0 = NULL;
    int rc = pm_engine_new(&eng, b->m, &o, err, sizeof err);
    if (!rc) rc = pm_engine_new(&eng0, b->m, &plain, err, sizeof err);
    pm_logit_bias push = {ids[3], 100.0f};
    for (int c = 0; !rc && c < 2; c++) {
        pm_request r = {.ids = ids, .n_ids = PROMPT, .max_tokens = ANSWER, .logit_bias = &push, .n_logit_bias = c == 0};
        r.sampling.temperature = c == 0 ? 0.0f : 1.0f;
        r.sampling.seed = 5;
        bench_progress("decode batch 1 with prompt-lookup drafts (%s)", c == 0 ? "a repeating answer" : "a sampled answer");
        int64_t d0 = 0, a0 = 0, d1 = 0, a1 = 0;
        pm_engine_draft_stats(eng, &d0, &a0);
        pairs_rec p;
        if ((rc = alternate(eng0, &r, eng, &r, &p, err, sizeof err))) break;
        pm_engine_draft_stats(eng, &d1, &a1);
        bench_row(b, "decode", c == 0 ? "draft 4 / none, a repeating answer" : "draft 4 / none, a sampled answer", p.ratio,
                  "x", -1, -1,
                  json_pack("{s:f, s:f, s:I, s:I, s:b}", "with_s", p.t_with, "without_s", p.t_without, "drafted", (json_int_t)(d1 - d0),
                            "taken", (json_int_t)(a1 - a0), "same_tokens", p.same),
                  "batch 1, %d tokens after a %d-token prompt (a phrase ten times)%s: decode %.2f s with --draft 4 against %.2f s "
                  "without (median of %d alternating pairs); %lld drafted, %lld taken; tokens %s",
                  ANSWER - 1, PROMPT, c == 0 ? ", greedy, every token pushed to one of the phrase's (a logit bias)" : ", sampled at T 1",
                  p.t_with, p.t_without, PAIRS, (long long)(d1 - d0), (long long)(a1 - a0),
                  p.same ? "the same" : "DIFFER (a bug: drafting must be exact)");
        if (!p.same) rc = PM_ESTATE;
    }
    if (!rc) rc = bench_prediction(b, eng0, ids, err, sizeof err);
    if (rc) fprintf(stderr, "phi4mm bench: drafting: %s\n", err[0] ? err : pm_status_name(rc));
    pm_engine_free(eng);
    pm_engine_free(eng0);
    return rc;
}
