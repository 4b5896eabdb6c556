/* restrict.h — a request's token restrictions, vLLM's: allowed_token_ids (only these tokens may
 * come) and bad_words (a word's tokens never all come in a row: the last one is banned where the
 * answer ends with the others). Both only lower logits to -inf, so they compose with the JSON and
 * guided masks, min_tokens and the penalties in any order. */
#ifndef PM_ENGINE_RESTRICT_H
#define PM_ENGINE_RESTRICT_H

#include <stdint.h>

#include "phi4mm.h"
#include "tok/tokenizer.h"
#include "util/err.h"

typedef struct pm_restrict {
    int32_t *allowed;   /* sorted, without repeats (NULL: every token allowed) */
    int n_allowed;
    float *kept;        /* scratch [n_allowed]: the allowed tokens' logits while the rest are lowered */
    int32_t *bad;       /* the bad words' token sequences, one after the other */
    int *bad_end;       /* sequence k is bad[k ? bad_end[k - 1] : 0, bad_end[k]) */
    int n_bad;
} pm_restrict;

/* Checks req's allowed_token_ids and bad_words (PM_EINVAL naming the entry). */
int pm_restrict_check(const pm_request *req, int vocab, pm_err *e);

/* The restrictions of req (checked): the allowed set, and each bad word tokenized as the answer
 * could write it, at its start and after a space (the word without its leading whitespace, and
 * " " + that: vLLM's two spellings, the second kept here whenever its tokens differ). */
int pm_restrict_init(pm_restrict *r, const pm_tokenizer *tok, const pm_request *req, pm_err *e);

/* Lowers to -inf the logits of the tokens that may not come after the answer out[0, n_out). */
void pm_restrict_apply(const pm_restrict *r, const int32_t *out, int n_out, float *logits, int vocab);

void pm_restrict_free(pm_restrict *r);

#endif
