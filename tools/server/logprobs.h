/* logprobs.h — a job's log-probabilities as the OpenAI APIs write them. */
#ifndef PM_SRV_LOGPROBS_H
#define PM_SRV_LOGPROBS_H

#include <jansson.h>

#include "job.h"

/* Entries [from, to) of j->lps (j->mu held, or the job done): for chat
 * {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}],
 * "refusal": null}; for completions {"tokens", "token_logprobs", "top_logprobs": [{token:
 * logprob}], "text_offset"} (offsets in characters of the generated text, as Python indexes it; a token
 * that continues a character counts none); with echo the prompt's tokens come first, the first with
 * null log-probability and alternatives. A token's "token" is its
 * bytes as text (a piece of a UTF-8 character becomes U+FFFD; "bytes" keeps them). NULL on OOM. */
json_t *srv_logprobs_json(const srv_job *j, int from, int to);
/* vLLM's prompt_logprobs (the job done): [null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...],
 * an object a prompt position after the first with its token and the prompt_top likeliest. NULL on OOM. */
json_t *srv_prompt_logprobs_json(const srv_job *j);

#endif
