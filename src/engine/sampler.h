/* sampler.h — next-token choice from logits: logit biases and penalties, then greedy, or
 * temperature -> top-k -> top-p -> min-p -> draw, in the order Hugging Face's generate applies its warpers
 * (and vLLM its biases and penalties). The RNG state belongs to the sequence
 * (seeded per request), so results do not depend on other requests. */
#ifndef PM_SAMPLER_H
#define PM_SAMPLER_H

#include <stdint.h>
#include "phi4mm.h"

typedef struct pm_seen_token {
    int32_t token;
    int32_t count; /* times generated (0: a prompt token only) */
} pm_seen_token;

typedef struct pm_sampler {
    pm_sampling p;
    uint64_t state;
    int *idx;     /* scratch [vocab] */
    float *prob;  /* scratch [vocab] */
    int vocab;
    pm_logit_bias *bias;  /* copied from the request */
    int n_bias;
    /* With penalties: the distinct tokens of the prompt and the output, each with how often it
     * was generated (a step touches only those), found by a hash of open addressing: memory by
     * what the sequence holds, not by the vocabulary. */
    int penalties;
    pm_seen_token *seen;
    int n_seen;
    int32_t *slot;    /* [n_slots], a power of two: index + 1 into seen, 0 empty */
    int n_slots;
} pm_sampler;

/* p's penalties and bias[n_bias] (copied) apply from the first token on; bias tokens must be in
 * [0, vocab) (the engine checks requests before). */
int pm_sampler_init(pm_sampler *s, const pm_sampling *p, const pm_logit_bias *bias, int n_bias, int vocab);
void pm_sampler_free(pm_sampler *s);
/* The prompt's tokens (a repetition penalty covers them) and each generated token, once chosen;
 * PM_ENOMEM when the table of seen tokens cannot grow (the penalties would miss a token). */
int pm_sampler_prompt(pm_sampler *s, const int32_t *ids, int n);
int pm_sampler_accept(pm_sampler *s, int32_t token);
/* Whether pm_sampler_next changes the logits it is given (temperature, biases or penalties). */
int pm_sampler_modifies(const pm_sampler *s);
/* Adds the biases and applies the penalties to logits[vocab] (what pm_sampler_next does first). */
void pm_sampler_penalize(const pm_sampler *s, float *logits);
/* Chooses a token from logits[vocab] (logits may be modified). */
int32_t pm_sampler_next(pm_sampler *s, float *logits);
/* Index of the largest logit (lowest index on ties, as torch.argmax). */
int32_t pm_argmax(const float *x, int n);
/* log(sum(exp(x))) over x[n], in double around the maximum: what log-softmax subtracts. */
double pm_logsumexp(const float *x, int n);
/* The k (<= PM_MAX_TOP_LOGPROBS) largest of x[n], largest first, lower index first on ties, as
 * (index, value, rank) into out; returns how many (min(k, n)). */
int pm_top_k(const float *x, int n, int k, pm_logprob *out);
/* 1 + how many of x[n] are larger than x[t] (vLLM's rank: tokens as likely share one). */
int32_t pm_rank(const float *x, int n, int32_t t);
/* out[i] = x[i] - logsumexp(x): log-probabilities of logits x[n]. */
void pm_log_softmax(const float *x, int n, float *out);
/* KL(P || Q) = sum_i P_i (log P_i - log Q_i) in nats, P given as log-probabilities lp[n] (a
 * pm_log_softmax), Q as logits x[n]; terms where P is 0 add nothing; never below 0. */
double pm_kl_divergence(const float *lp, const float *x, int n);

#endif
