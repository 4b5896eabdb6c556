/* sampler.h — next-token choice from logits: greedy, or temperature -> top-k -> top-p -> draw,
 * in the order Hugging Face's generate applies its warpers. The RNG state belongs to the sequence
 * (seeded per request), so results do not depend on other requests. */
#ifndef PM_SAMPLER_H
#define PM_SAMPLER_H

#include <stdint.h>
#include "phi4mm.h"

typedef struct pm_sampler {
    pm_sampling p;
    uint64_t state;
    int *idx;     /* scratch [vocab] */
    float *prob;  /* scratch [vocab] */
    int vocab;
} pm_sampler;

int pm_sampler_init(pm_sampler *s, const pm_sampling *p, int vocab);
void pm_sampler_free(pm_sampler *s);
/* Chooses a token from logits[vocab] (logits may be modified). */
int32_t pm_sampler_next(pm_sampler *s, float *logits);
/* Index of the largest logit (lowest index on ties, as torch.argmax). */
int32_t pm_argmax(const float *x, int n);
/* log(sum(exp(x))) over x[n], in double around the maximum: what log-softmax subtracts. */
double pm_logsumexp(const float *x, int n);
/* The k (<= PM_MAX_TOP_LOGPROBS) largest of x[n], largest first, lower index first on ties, as
 * (index, value) into out; returns how many (min(k, n)). */
int pm_top_k(const float *x, int n, int k, pm_logprob *out);

#endif
