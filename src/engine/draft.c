/* draft.c — the tokens a decode step checks after the next one (pm_engine_opts.draft_tokens,
 * pm_request.prediction): prompt lookup and predicted outputs. The step (engine.c) feeds them in
 * the same forward and the sampler takes them row by row. */
#include <stdlib.h>
#include <string.h>

#include "engine/seq.h"

/* From a prediction (pm_request.prediction): while the answer so far is its beginning, what follows
 * it there; else after the answer's last 3 (else 2) tokens where they occur in it, the first
 * occurrence from where the last draft began on (the answer keeps pace with it), else the first
 * before. At most k tokens into s->draft; returns how many. */
static int draft_from_prediction(pm_seq *s, int k) {
    int g0 = s->n_gen, n = s->n_tokens;
    const int32_t *ans = s->tokens + s->n_prompt;
    if (g0 < s->n_pred && !memcmp(ans, s->pred, sizeof(int32_t) * (size_t)g0)) {
        int m = s->n_pred - g0 < k ? s->n_pred - g0 : k;
        memcpy(s->draft, s->pred + g0, sizeof(int32_t) * (size_t)m);
        s->pred_at = g0;
        return m;
    }
    for (int g = 3; g >= 2; g--) {
        if (g0 < g) continue;
        const int32_t *tail = s->tokens + n - g;
        for (int pass = 0; pass < 2; pass++) {
            int q0 = pass ? 0 : s->pred_at > g ? s->pred_at - g : 0, q1 = pass ? s->pred_at : s->n_pred - g;
            for (int q = q0; q < q1 && q + g < s->n_pred; q++)
                if (s->pred[q] == tail[0] && !memcmp(s->pred + q, tail, sizeof(int32_t) * (size_t)g)) {
                    int m = s->n_pred - (q + g) < k ? s->n_pred - (q + g) : k;
                    memcpy(s->draft, s->pred + q + g, sizeof(int32_t) * (size_t)m);
                    s->pred_at = q + g;
                    return m;
                }
        }
    }
    return 0;
}

/* This step's drafts (s->draft, s->n_draft; 0 when none), as many as it may check: from the
 * request's prediction when it has one (draft_from_prediction), else, with draft_tokens on, by
 * prompt lookup: the tokens that followed an earlier occurrence of the sequence's last 3 (else 2)
 * tokens. Only while it decodes alone (beside others the batch already shares each pass over the
 * weights), within its max_tokens and context, and, before the LongRoPE switch, only over
 * positions the short factors cover (the switch happens at the same step as without drafts). */
void pm_seq_draft(pm_engine *eng, pm_seq *s) {
    const pm_llm_config *c = &eng->m->llm.c;
    int n = s->n_tokens, p0 = s->kv.len, k = s->draft_room ? s->draft_room : 2;
    int most = s->pred && !eng->o.draft_tokens ? PM_PREDICTION_DRAFT : eng->o.draft_tokens;
    s->n_draft = 0;
    s->draft_pred = 0;
    if (!most || eng->n != 1 || s->n_gen < 1 || n - p0 != 1 || pm_prompt_lp_pending(&s->plp)) return;
    if (eng->draft_rows < most + 1) { /* a prediction in an engine that does not draft: its rows' logits, once */
        float *dl = malloc(sizeof(float) * (size_t)(most + 1) * (size_t)c->vocab);
        if (!dl) return; /* no drafts: the steps go on as without them */
        free(eng->draft_logits);
        eng->draft_logits = dl;
        eng->draft_rows = most + 1;
    }
    if (k > most) k = most;
    if (k > s->max_tokens - s->n_gen - 1) k = s->max_tokens - s->n_gen - 1;
    if (k > s->max_context - n - 1) k = s->max_context - n - 1;
    if (!s->rope_long && k > c->orig_max_pos - 1 - p0) k = c->orig_max_pos - 1 - p0;
    if (k > 0 && s->pred && (s->n_draft = draft_from_prediction(s, k)) > 0) {
        s->draft_pred = 1;
        s->pred_drafted += s->n_draft; /* counted now: the sequence may end inside the step that checks them */
        return;
    }
    if (!eng->o.draft_tokens) return; /* prompt lookup: opt-in */
    for (int g = 3; g >= 2 && k > 0; g--) { /* the latest occurrence with k tokens after it, else the one with most */
        if (n <= g) continue;
        const int32_t *tail = s->tokens + n - g;
        int best = -1, best_m = 0;
        for (int q = n - g - 1; q >= 0 && best_m < k; q--)
            if (s->tokens[q] == tail[0] && !memcmp(s->tokens + q, tail, sizeof(int32_t) * (size_t)g)) {
                int m = n - (q + g) < k ? n - (q + g) : k;
                if (m > best_m) {
                    best = q;
                    best_m = m;
                }
            }
        if (best >= 0) {
            memcpy(s->draft, s->tokens + best + g, sizeof(int32_t) * (size_t)best_m);
            s->n_draft = best_m;
            return;
        }
    }
}
