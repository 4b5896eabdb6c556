/* bench_prefix.c — the prompt cache's row: a conversation's next turn. A 1,060-token history (a
 * system message, a user message, each ending in <|end|>, then <|assistant|>) is answered once (its
 * prompt's chunks up to its last <|end|> stay in the cache), then the next turn (the history, the
 * answer and a new message: 40 more tokens) is timed from submit to its first token with the
 * cache and in an engine without it, one after the other in this process; the two first tokens'
 * logits must be the same bits (the cache is exact: prefix_cache.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "engine/engine_internal.h"
#include "phi4mm.h"

enum { HISTORY = 1060, TURN = 40 };

typedef struct first_tok {
    pm_engine *eng;
    int64_t id;
    float *logits; /* [vocab]: what the first token was sampled from */
    int vocab, got;
} first_tok;

static int on_first(void *u, int32_t tok, const char *text, size_t len) {
    (void)tok;
    (void)text;
    (void)len;
    first_tok *f = u;
    const float *lg = pm_engine_last_logits(f->eng, f->id, NULL, NULL);
    if (lg && !f->got) memcpy(f->logits, lg, sizeof(float) * (size_t)f->vocab);
    f->got = 1;
    return 0;
}

/* Seconds from submitting r (one token to generate) to its end; its logits into f. */
static double request_seconds(pm_engine *eng, const pm_request *rq, first_tok *f, char *err, size_t errlen) {
    pm_request r = *rq;
    r.max_tokens = 1;
    f->eng = eng;
    f->got = 0;
    pm_callbacks cb = {.on_token = on_first, .user = f};
    double t0 = bench_now();
    /* the id is known after submit, before the first step samples */
    if (pm_engine_submit(eng, &r, &cb, &f->id, err, errlen)) return -1;
    while (pm_engine_live(eng) > 0)
        if (pm_engine_step(eng) < 0) return -1;
    return f->got ? bench_now() - t0 : -1;
}

static double turn_seconds(pm_engine *eng, const int32_t *ids, int n, first_tok *f, char *err, size_t errlen) {
    pm_request r = {0};
    r.ids = ids;
    r.n_ids = (size_t)n;
    return request_seconds(eng, &r, f, err, errlen);
}

/* The same for a conversation about a 1344x896 image: the first question, then the next turn with
 * the image sent again (its encoder output and the prompt's chunks kept), against an engine
 * without the cache. */
static int image_turn(bench_ctx *b, const pm_engine_opts *o, const pm_engine_opts *plain, float *lc, float *lf, int vocab) {
    enum { W = 1344, H = 896 };
    char err[1024] = "";
    uint8_t *rgb = bench_synth_rgb(W, H);
    pm_engine *eng = NULL, *eng0 = NULL;
    int rc = rgb ? pm_engine_new(&eng, b->m, o, err, sizeof err) : PM_ENOMEM;
    if (!rc) rc = pm_engine_new(&eng0, b->m, plain, err, sizeof err);
    pm_image_in img = {rgb, W, H};
    pm_request q1 = {0}, q2 = {0};
    q1.prompt = "<|user|><|image_1|>Describe the image.<|end|><|assistant|>";
    q2.prompt = "<|user|><|image_1|>Describe the image.<|end|><|assistant|>A pattern of colours.<|end|><|user|>Which colour is at the top "
                "left?<|end|><|assistant|>";
    q1.images = q2.images = &img;
    q1.n_images = q2.n_images = 1;
    first_tok fc = {NULL, 0, lc, vocab, 0}, ff = {NULL, 0, lf, vocab, 0};
    double t1 = -1, tc = -1, tf = -1;
    bench_progress("a conversation's next turn about an image with the prompt cache");
    if (!rc && (t1 = request_seconds(eng, &q1, &fc, err, sizeof err)) < 0) rc = PM_ESTATE;
    if (!rc && (tc = request_seconds(eng, &q2, &fc, err, sizeof err)) < 0) rc = PM_ESTATE;
    if (!rc && (tf = request_seconds(eng0, &q2, &ff, err, sizeof err)) < 0) rc = PM_ESTATE;
    pm_prefix_stats st;
    pm_engine_prefix_stats(eng, &st);
    pm_engine_free(eng);
    pm_engine_free(eng0);
    free(rgb);
    if (rc) {
        fprintf(stderr, "phi4mm bench: prompt cache (image): %s\n", err[0] ? err : pm_status_name(rc));
        return rc;
    }
    int same = !memcmp(lc, lf, sizeof(float) * (size_t)vocab);
    bench_row(b, "serve", "next turn about an image with the prompt cache", tc, "s", -1, -1,
              json_pack("{s:f, s:f, s:f, s:I, s:I, s:b}", "fresh_s", tf, "first_turn_s", t1, "speedup", tf / tc, "reused",
                        (json_int_t)st.reused, "media_hits", (json_int_t)st.media_hits, "same_bits", same),
              "a 1344x896 image's conversation, the next turn (the image sent again): submit to first token %.2f s with %lld positions and "
              "%lld image encode(s) from the caches, against %.2f s without them (%.1f x; the first turn %.2f s); first token's logits %s",
              tc, (long long)st.reused, (long long)st.media_hits, tf, tf / tc, t1, same ? "the same bits" : "DIFFER (a bug: the caches must be exact)");
    return same ? PM_OK : PM_ESTATE;
}

int bench_prefix(bench_ctx *b) {
    pm_model_info info;
    pm_model_get_info(b->m, &info);
    char err[1024] = "";
    int32_t *ids = malloc(sizeof(int32_t) * (HISTORY + TURN));
    float *lc = malloc(sizeof(float) * (size_t)info.vocab), *lf = malloc(sizeof(float) * (size_t)info.vocab);
    pm_engine *eng = NULL, *eng0 = NULL;
    int rc = ids && lc && lf ? PM_OK : PM_ENOMEM;
    uint32_t seed = 4242u;
    for (int i = 0; !rc && i < HISTORY + TURN; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = (int32_t)(1000 + (seed >> 8) % 150000u);
    }
    /* the messages' ends: a system message, the user's, the answer's and the next message's, each
     * followed by the next role's tag (absent ids leave random text: the row still runs) */
    int32_t end = pm_model_token_id(b->m, "<|end|>"), user = pm_model_token_id(b->m, "<|user|>"),
            assistant = pm_model_token_id(b->m, "<|assistant|>");
    const int ends[] = {300, HISTORY - 1, HISTORY + 20, HISTORY + TURN - 1};
    for (int k = 0; !rc && end >= 0 && user >= 0 && assistant >= 0 && k < 4; k++) {
        ids[ends[k] - 1] = end;
        ids[ends[k]] = k % 2 ? assistant : user;
    }
    pm_engine_opts o, plain;
    pm_engine_opts_default(&o);
    o.prefill_chunk = b->o.prefill_chunk;
    plain = o;
    o.prefix_cache = (int64_t)2 << 30;
    if (!rc) rc = pm_engine_new(&eng, b->m, &o, err, sizeof err);
    if (!rc) rc = pm_engine_new(&eng0, b->m, &plain, err, sizeof err);
    first_tok fc = {NULL, 0, lc, info.vocab, 0}, ff = {NULL, 0, lf, info.vocab, 0};
    double t_hist = -1, t_cached = -1, t_fresh = -1;
    bench_progress("a conversation's next turn with the prompt cache");
    if (!rc && (t_hist = turn_seconds(eng, ids, HISTORY, &fc, err, sizeof err)) < 0) rc = PM_ESTATE;
    if (!rc && (t_cached = turn_seconds(eng, ids, HISTORY + TURN, &fc, err, sizeof err)) < 0) rc = PM_ESTATE;
    if (!rc && (t_fresh = turn_seconds(eng0, ids, HISTORY + TURN, &ff, err, sizeof err)) < 0) rc = PM_ESTATE;
    pm_prefix_stats st;
    pm_engine_prefix_stats(eng, &st);
    pm_engine_free(eng);
    pm_engine_free(eng0);
    if (rc) {
        fprintf(stderr, "phi4mm bench: prompt cache: %s\n", err[0] ? err : pm_status_name(rc));
    } else {
        int same = !memcmp(lc, lf, sizeof(float) * (size_t)info.vocab);
        bench_row(b, "serve", "next turn with the prompt cache", t_cached, "s", -1, -1,
                  json_pack("{s:f, s:f, s:f, s:i, s:i, s:I, s:b}", "fresh_s", t_fresh, "history_s", t_hist, "speedup", t_fresh / t_cached,
                            "history_tokens", HISTORY, "turn_tokens", HISTORY + TURN, "reused", (json_int_t)st.reused, "same_bits", same),
                  "submit to first token of a %d-token prompt whose first %d tokens were an ended prompt: %.2f s, %lld positions from the "
                  "cache (its chunks of up to %d rows, each ending at a message's <|end|>), against %.2f s without the cache (%.1f x); "
                  "first token's logits %s",
                  HISTORY + TURN, HISTORY, t_cached, (long long)st.reused, o.prefill_chunk, t_fresh, t_fresh / t_cached,
                  same ? "the same bits" : "DIFFER (a bug: the cache must be exact)");
        if (!same) rc = PM_ESTATE;
    }
    if (!rc && !b->o.skip_image) rc = image_turn(b, &o, &plain, lc, lf, info.vocab);
    free(ids);
    free(lc);
    free(lf);
    return rc;
}
