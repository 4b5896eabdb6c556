/* bench_prefix.c — the prompt cache's row: a conversation's next turn. A 1,060-token history is
 * answered once (its prompt's whole chunks stay in the cache), then the next turn (the history and
 * 40 new tokens) is timed from submit to its first token with the cache and in an engine without
 * it, one after the other in this process; the two first tokens' logits must be the same bits (the
 * cache is exact: prefix_cache.h). */
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

/* Seconds from submitting ids[0, n) (one token to generate) to its end; its logits into f. */
static double turn_seconds(pm_engine *eng, const int32_t *ids, int n, first_tok *f, char *err, size_t errlen) {
    pm_request r = {0};
    r.ids = ids;
    r.n_ids = (size_t)n;
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
                  "cache (whole %d-row chunks), against %.2f s without the cache (%.1f x); first token's logits %s",
                  HISTORY + TURN, HISTORY, t_cached, (long long)st.reused, o.prefill_chunk, t_fresh, t_fresh / t_cached,
                  same ? "the same bits" : "DIFFER (a bug: the cache must be exact)");
        if (!same) rc = PM_ESTATE;
    }
    free(ids);
    free(lc);
    free(lf);
    return rc;
}
