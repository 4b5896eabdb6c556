/* seq.h — the engine's private state: a live sequence (pm_seq) and the engine (struct pm_engine),
 * shared by engine.c (admission, the step), take.c (what a sampled token does: masks, stops, text)
 * and draft.c (the tokens a step checks beside the next one). Not part of the public API. */
#ifndef PM_ENGINE_SEQ_H
#define PM_ENGINE_SEQ_H

#include <stdint.h>

#include "engine/grammar.h"
#include "engine/json_mode.h"
#include "engine/json_schema.h"
#include "engine/media_cache.h"
#include "engine/model.h"
#include "engine/prefix_cache.h"
#include "engine/prepare.h"
#include "engine/prompt_lp.h"
#include "engine/regex.h"
#include "engine/restrict.h"
#include "engine/sampler.h"
#include "phi4mm.h"
#include "tok/tokenizer.h"

enum { PARK_NONE, PARK_WAITING, PARK_AWAY };

typedef struct pm_seq {
    int64_t id;
    pm_prepared prep;       /* mode, adapter, prompt ids and merged prompt rows */
    int32_t *tokens;        /* prompt ids then generated ids */
    int n_tokens, cap_tokens, n_prompt, n_gen, max_tokens, max_context;
    pm_kv_cache kv;
    int rope_long;
    int cached;             /* the prompt positions the prompt cache held (on_prompt_cached) */
    pm_sampler sampler;
    pm_tok_stream *stream;
    pm_callbacks cb;
    char **stop;
    int n_stop;
    int32_t *stop_ids;      /* pm_request.stop_ids (copied) */
    int n_stop_ids;
    int stop_in_output;     /* what ended the request stays in the text */
    pm_restrict bans;       /* allowed_token_ids, bad_words */
    char *hold;             /* text held back because it may start a stop string */
    size_t hold_len;
    int cancelled;
    float *logits;
    int logits_ready;       /* its prompt (or recompute) was prefilled beside the steps: sample first */
    int top_logprobs;       /* < 0: no log-probabilities (not asked, or no on_logprobs); else how many alternatives */
    int logprobs_eos;       /* the end-of-sequence token reports its log-probabilities too */
    float *lp_logits;       /* the logits as the model gave them, where sampling rescales its own [vocab] */
    int min_tokens;         /* the end tokens and the stop tokens are banned until this many have come */
    int ignore_eos;         /* the end tokens are banned throughout */
    int json;               /* the mask holds the output now (JSON mode, or a lazy value begun): json_state has the value so far */
    int32_t json_open;      /* lazy JSON mode: the tokens that begin and end a held value (-1: not lazy) */
    int32_t json_close;
    pm_json_schema *schema; /* with a schema: its graph, which json_state points into */
    pm_json_state json_state;
    pm_regex *regex;        /* a guided pattern's DFA (PM_FORMAT_REGEX, PM_FORMAT_CHOICE; NULL: none) */
    int32_t rx_state;       /* where the output so far has taken it */
    pm_regex_masks *rx_masks; /* its masks at the states the output came back to */
    pm_grammar *grammar;    /* a grammar (PM_FORMAT_GRAMMAR; NULL: none) */
    pm_grammar_state *gstate; /* ... and where the output so far has taken its parse */
    pm_prompt_lp plp;       /* prompt_logprobs: the prompt's scores, reported before its first token */
    int parked;             /* PARK_*: waiting for, or away on, a recompute beside the steps */
    int64_t kv_reserved;    /* bytes counted against the engine's budget while live */
    int32_t draft[PM_MAX_DRAFT]; /* this step's drafted tokens (pm_engine_opts.draft_tokens), checked after its next */
    int n_draft;
    int draft_room;         /* how many the next drafting step may check (grows while drafts are taken) */
    int32_t *pred;          /* pm_request.prediction's tokens (NULL: none) */
    int n_pred, pred_at;    /* ... and where its last draft began */
    int draft_pred;         /* this step's drafts came from the prediction */
    int pred_drafted, pred_accepted; /* its tokens drafted and taken (pm_callbacks.on_prediction) */
} pm_seq;

struct pm_engine {
    pm_model *m;
    pm_engine_opts o;
    pm_seq **seqs;
    int n;
    int64_t next_id;
    int64_t kv_budget;      /* < 0: none */
    int64_t kv_reserved;    /* sum over the live sequences */
    pm_fault fault;         /* test-only (engine_internal.h) */
    pm_prefix_cache *prefix;   /* prefilled prompts' KV (pm_engine_opts.prefix_cache); NULL: off */
    pm_media_cache *media;     /* and their media's encoder outputs, beside it */
    pm_json_vocab *json_vocab; /* built at the first JSON-mode request */
    pm_regex_vocab *regex_vocab; /* built at the first guided request */
    pm_grammar_vocab *grammar_vocab; /* the vocabulary's byte trie, built at the first grammar */
    uint8_t *json_allow;    /* the masks' scratch [vocab] (JSON and guided patterns) */
    int32_t end_id;         /* <|end|>, after which a prefill chunk may end early (chunk_end); -1: none */
    float *draft_logits;    /* [draft_rows][vocab]: a drafting step's rows' logits */
    int draft_rows;         /* 1 + the most drafts a step may check (0: none allocated yet) */
    int64_t drafted, accepted; /* tokens drafted and taken so far (pm_engine_draft_stats) */
};

/* Ends sequence i (its callbacks' last calls, its reservation given back) and removes it from
 * eng->seqs (the last one takes its place). */
void pm_seq_finish(pm_engine *eng, int i, pm_finish why);
/* The same for a sequence that failed (PM_FINISH_ERROR): code is the error's class (on_error),
 * error its message. */
void pm_seq_fail(pm_engine *eng, int i, int code, const char *error);

/* Samples sequence i's next token from its logits (the model's, after its last position), reports
 * and emits it (*out, when it is kept): 1 when the sequence ended here (finished and gone from
 * eng->seqs), 0 when it goes on, < 0 when the step fails (e set). take.c */
int pm_seq_take_token(pm_engine *eng, int i, int32_t *out, pm_err *e);

/* This step's drafts into s->draft / s->n_draft (0 when none). draft.c */
void pm_seq_draft(pm_engine *eng, pm_seq *s);

#endif
