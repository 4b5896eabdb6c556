/* prompt_lp.h — log-probabilities of a prompt's own tokens (pm_request.prompt_logprobs): each
 * token after the first, under the tokens before it, as a scoring run (OpenAI's echo with
 * logprobs) reads them. The prefill hands over each chunk's rows after the final norm; the
 * lm_head runs over them PROMPT_LP_ROWS at a time, on the decode GEMV, so a row's numbers do not
 * depend on the chunking (ops.h). */
#ifndef PM_PROMPT_LP_H
#define PM_PROMPT_LP_H

#include "model/llm.h"
#include "phi4mm.h"

typedef struct pm_prompt_lp {
    int n_prompt;
    int top;            /* alternatives an entry (0..PM_MAX_TOP_LOGPROBS) */
    int from;           /* the first position reported (pm_request.prompt_logprobs_from) */
    int scored;         /* positions [max(from, 1), scored] are filled (from - 1 or 0: none yet) */
    pm_logprob *chosen; /* [n_prompt]: entry p is ids[p] given ids[< p]; entry 0 is not scored */
    pm_logprob *alts;   /* [n_prompt * top], most likely first */
    int n_alts;         /* min(top, vocab) */
} pm_prompt_lp;

/* Bytes pm_prompt_lp_init allocates (what a sequence holds until its first step). */
int64_t pm_prompt_lp_bytes(int n_prompt, int top);
int pm_prompt_lp_init(pm_prompt_lp *lp, int n_prompt, int top, int from, pm_err *e);
void pm_prompt_lp_free(pm_prompt_lp *lp);
/* Moves src's scores into dst (empty), leaving src empty. */
void pm_prompt_lp_move(pm_prompt_lp *dst, pm_prompt_lp *src);
/* 1 while positions remain to be scored. */
int pm_prompt_lp_pending(const pm_prompt_lp *lp);
/* How many of the prompt's first rows need not be computed (what the prompt cache may supply):
 * all but the last while nothing remains to be scored. */
int pm_prompt_lp_rows_skippable(const pm_prompt_lp *lp, int n_prompt);
/* 1 once a position has been scored. */
int pm_prompt_lp_started(const pm_prompt_lp *lp);
/* Scores what the rows of positions [p0, p0 + n) predict: positions p0 + 1 .. p0 + n below
 * n_prompt, those not scored before (a recompute runs the rows again). normed is [n, hidden]
 * after the final norm; ids the prompt's ids (a media row's is its placeholder). cb (NULL: none):
 * each scored position's logits through cb->on_prompt_logits, in order. */
int pm_prompt_lp_score(pm_prompt_lp *lp, const pm_llm *llm, const float *normed, int p0, int n, const int32_t *ids, const pm_callbacks *cb,
                       pm_err *e);
/* Every entry from `from` on through cb->on_prompt_logprobs, position 0 first (logprob NAN, no
 * alternatives) when from is 0. */
void pm_prompt_lp_report(const pm_prompt_lp *lp, const int32_t *ids, const pm_callbacks *cb);

#endif
