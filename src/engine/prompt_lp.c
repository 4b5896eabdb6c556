/* prompt_lp.c — see prompt_lp.h. */
#include "engine/prompt_lp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "nn/ops.h"
#include "util/err.h"

/* rows per lm_head pass: within the decode GEMV's row-independent range (ops.h) */
enum { PROMPT_LP_ROWS = 16 };

int64_t pm_prompt_lp_bytes(int n_prompt, int top) { return (int64_t)n_prompt * (1 + top) * (int64_t)sizeof(pm_logprob); }

/* Positions [1, this] need no score: before from (row p - 1 scores position p). */
static int unscored(int from) { return from > 1 ? from - 1 : 0; }

int pm_prompt_lp_init(pm_prompt_lp *lp, int n_prompt, int top, int from, pm_err *e) {
    memset(lp, 0, sizeof *lp);
    if (from < 0) from = 0;
    if (top < 0) top = 0;
    if (top > PM_MAX_TOP_LOGPROBS) top = PM_MAX_TOP_LOGPROBS;
    lp->chosen = pm_calloc((size_t)n_prompt, sizeof *lp->chosen, e);
    if (top) lp->alts = pm_calloc((size_t)n_prompt * (size_t)top, sizeof *lp->alts, e);
    if (e->code) {
        pm_prompt_lp_free(lp);
        return e->code;
    }
    lp->n_prompt = n_prompt;
    lp->top = top;
    lp->from = from;
    lp->scored = unscored(from); /* their rows need no lm_head */
    return PM_OK;
}

void pm_prompt_lp_free(pm_prompt_lp *lp) {
    free(lp->chosen);
    free(lp->alts);
    memset(lp, 0, sizeof *lp);
}

void pm_prompt_lp_move(pm_prompt_lp *dst, pm_prompt_lp *src) {
    *dst = *src;
    memset(src, 0, sizeof *src);
}

int pm_prompt_lp_pending(const pm_prompt_lp *lp) { return lp->chosen && lp->scored < lp->n_prompt - 1; }

int pm_prompt_lp_rows_skippable(const pm_prompt_lp *lp, int n_prompt) {
    return pm_prompt_lp_pending(lp) ? lp->scored : n_prompt - 1;
}

int pm_prompt_lp_started(const pm_prompt_lp *lp) { return lp->chosen && lp->scored > unscored(lp->from); }

int pm_prompt_lp_score(pm_prompt_lp *lp, const pm_llm *llm, const float *normed, int p0, int n, const int32_t *ids, const pm_callbacks *cb,
                       pm_err *e) {
    int V = llm->c.vocab, H = llm->c.hidden;
    int j0 = lp->scored - p0, j1 = lp->n_prompt - 1 - p0; /* row j scores position p0 + j + 1 */
    if (j0 < 0) j0 = 0;
    if (j1 > n) j1 = n;
    if (!lp->chosen || j0 >= j1) return PM_OK;
    float *lg = pm_malloc(sizeof(float) * (size_t)PROMPT_LP_ROWS * (size_t)V, e);
    if (!lg) return e->code;
    lp->n_alts = lp->top < V ? lp->top : V;
    for (int b = j0; b < j1; b += PROMPT_LP_ROWS) {
        int r = j1 - b < PROMPT_LP_ROWS ? j1 - b : PROMPT_LP_ROWS;
        pm_linear(lg, normed + (size_t)b * H, r, llm->lm_head, NULL);
#pragma omp parallel for schedule(dynamic, 1)
        for (int k = 0; k < r; k++) {
            const float *x = lg + (size_t)k * V;
            int pos = p0 + b + k + 1;
            int32_t t = ids[pos];
            double lse = pm_logsumexp(x, V);
            pm_logprob *alt = lp->alts ? lp->alts + (size_t)pos * lp->top : NULL;
            int m = alt ? pm_top_k(x, V, lp->top, alt) : 0;
            for (int q = 0; q < m; q++) alt[q].logprob = (float)(alt[q].logprob - lse);
            lp->chosen[pos].token = t;
            lp->chosen[pos].logprob = t >= 0 && t < V ? (float)(x[t] - lse) : -INFINITY;
            lp->chosen[pos].rank = t >= 0 && t < V ? pm_rank(x, V, t) : V;
        }
        if (cb && cb->on_prompt_logits)
            for (int k = 0; k < r; k++) cb->on_prompt_logits(cb->user, p0 + b + k + 1, lg + (size_t)k * V, V);
        lp->scored = p0 + b + r;
    }
    free(lg);
    return PM_OK;
}

void pm_prompt_lp_report(const pm_prompt_lp *lp, const int32_t *ids, const pm_callbacks *cb) {
    if (!lp->chosen || !cb->on_prompt_logprobs || lp->n_prompt <= 0) return;
    if (lp->from == 0) {
        pm_logprob first = {ids[0], NAN, 0};
        cb->on_prompt_logprobs(cb->user, 0, first, NULL, 0);
    }
    for (int p = lp->from > 1 ? lp->from : 1; p <= lp->scored; p++)
        cb->on_prompt_logprobs(cb->user, p, lp->chosen[p], lp->alts ? lp->alts + (size_t)p * lp->top : NULL, lp->n_alts);
}
