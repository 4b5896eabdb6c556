/* job.h — one accepted request, shared by its HTTP connection and the inference thread.
 *
 * Life: an HTTP worker fills the inputs (prompt, decoded media, parameters) and hands the job to
 * the scheduler; the scheduler's encoder thread runs its media encoders (a job with media) and the
 * inference thread submits it (admission), then streams tokens into `text` and finally records
 * the finish.
 * The HTTP side parks its connection (MHD_suspend_connection) while there is nothing to send and
 * is resumed by srv_job_notify_locked when what it waits for happens. Every accepted job ends in
 * DONE exactly once (admitted or not), so every accepted request gets a final answer.
 *
 * Locking: `mu` guards everything below "shared"; inputs belong to whoever holds the job at the
 * time (the HTTP worker until enqueued, then the inference thread, lending them to the encoder
 * thread while it encodes); `cancel` is atomic.
 * Parking protocol: park and notify both run under `mu`, so a resume can never precede its
 * suspend, and `conn` is cleared (under mu) when the connection completes. */
#ifndef PM_SRV_JOB_H
#define PM_SRV_JOB_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#include "audio_form.h"
#include "chat_parse.h"
#include "server.h"

/* One generated token's log-probabilities, and where it starts in the generated text. */
typedef struct srv_lp {
    pm_logprob chosen;
    int n_top;
    pm_logprob top[PM_MAX_TOP_LOGPROBS];
    int unscored;                   /* the echoed prompt's first token: nothing before it (null in JSON) */
    size_t offset;                  /* in characters (code points) of the generated text, as OpenAI counts */
} srv_lp;

typedef enum { SRV_JOB_CHAT = 0, SRV_JOB_TRANSCRIBE = 1, SRV_JOB_TRANSLATE = 2, SRV_JOB_COMPLETION = 3, SRV_JOB_RESPONSE = 4 } srv_job_kind;
typedef enum { SRV_JS_QUEUED = 0, SRV_JS_RUNNING = 1, SRV_JS_DONE = 2 } srv_job_state;
enum { SRV_WAIT_ADMIT = 1, SRV_WAIT_DATA = 2, SRV_WAIT_DONE = 4 };

struct srv_job {
    pthread_mutex_t mu;
    int refs;
    srv_ctx *ctx;

    /* request (immutable once enqueued, except the media, which the inference thread frees) */
    srv_job_kind kind;
    int stream, include_usage;
    int continuous_usage;           /* every chunk carries its choice's usage so far instead of null (vLLM's) */
    srv_resp_format format;
    char language[48];
    char id[48];                    /* the request's (every choice of it shares it) */
    int index;                      /* the choice: prompt * n + sample */
    int first_of_prompt;            /* the first choice of its prompt (the usage counts each prompt once) */
    long long created;              /* unix seconds */
    double t_arrival;               /* srv_now() at arrival */
    char *prompt;                   /* or, for a completions prompt of token ids: */
    int32_t *prompt_ids;
    int n_prompt_ids;
    pm_audio_in *audios;
    int n_audios;
    pm_image_in *images;
    int n_images;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int32_t *stop_ids;              /* pm_request.stop_ids (malloc'd) */
    int n_stop_ids;
    int stop_in_output, keep_special; /* as pm_request */
    int32_t *allowed_ids;           /* malloc'd */
    int n_allowed_ids;
    char **bad_words;               /* malloc'd strings */
    int n_bad_words;
    int max_tokens;
    int max_tokens_default;         /* the request named none: --default-max-tokens, or the context's room (scheduler.c) */
    pm_sampling sampling;
    pm_logit_bias *logit_bias;      /* malloc'd */
    int n_logit_bias;
    pm_format output_format;        /* text, a JSON object or a schema's value (response_format) */
    char *json_schema;              /* malloc'd */
    char *guide;                    /* a guided pattern (PM_FORMAT_REGEX) or grammar (PM_FORMAT_GRAMMAR; malloc'd) */
    int min_tokens, ignore_eos;
    char *cache_salt;               /* malloc'd; NULL: none */
    int max_crops;                  /* pm_request.max_crops (0: the server's --max-crops, else the checkpoint's) */
    srv_tool_mode tool_mode;        /* chat tools: the answer's calls come back as tool_calls (tool_calls.h) */
    char *resp_base;                /* /v1/responses: what the response object repeats of the request (JSON text, malloc'd) */
    char *resp_convo;               /* ... and the conversation to keep once answered (chat messages JSON; NULL: not kept) */
    int logprobs, top_logprobs;     /* as pm_request */
    int prompt_logprobs, prompt_top; /* vLLM's prompt_logprobs asked, and its alternatives (0..20) */
    int tokens_as_ids;              /* return_tokens_as_token_ids (vLLM's): entries name tokens "token_id:N" */
    int truncate_prompt;            /* as pm_request */
    int echo;                       /* completions: the prompt opens the text (and, with logprobs, the entries) */
    char *echo_text;                /* chat echo: this opens the text instead (malloc'd; NULL: none) */
    pm_mode mode;
    double audio_seconds;
    double seg_start, seg_end;      /* transcriptions: the part of the clip it transcribes, in seconds (chunking_strategy) */
    int64_t media_bytes;            /* decoded media counted against ctx->req_budget */
    int64_t body_bytes;             /* the request's body buffer, still held while its media decode */
    int media_refused;              /* the media budget refused a decode: 1 busy now, 2 never */
    pm_media_gate gate;             /* srv_job_media_gate */

    /* inference thread only */
    int64_t seq_id;
    int cancel_sent;
    int64_t kv_need;                /* KV bytes it will reserve; -1 until the scheduler has planned it */
    int plan_tokens;                /* its prompt after media expansion, once planned */
    /* the encoder thread's result for a job with media (the scheduler hands it over under its lock) */
    pm_encoded *enc;
    int enc_rc;
    char enc_err[512];

    atomic_int cancel;              /* the client went away: stop generating */

    /* shared (mu) */
    srv_job_state state;
    int admitted;                   /* submitted to the engine */
    int failed;                     /* ended without being admitted: err says why */
    srv_error err;
    char *text;                     /* everything generated so far (UTF-8) */
    size_t text_len, text_cap;
    int32_t *tokens;
    int n_tokens, cap_tokens;
    srv_lp *lps;                    /* with logprobs: one a generated token (after the prompt's, with echo) */
    int n_lps, cap_lps;
    pm_logprob *plps;               /* with prompt_logprobs: per prompt position 1 + prompt_top entries, the token's first */
    int n_plps, cap_plps;           /* positions recorded (the first one unscored) */
    int echoed;                     /* the prompt is in text */
    size_t lp_chars;                /* the recorded tokens' characters so far (the next one's offset) */
    pm_finish finish;
    int finish_code;                /* with PM_FINISH_ERROR: the error's class (a pm_status, on_error) */
    char finish_error[512];
    int prompt_tokens, completion_tokens;
    double t_first;                 /* first token, 0 until then */
    size_t tool_at, tool_end;       /* text offsets where <|tool_call|> / <|/tool_call|> came (SIZE_MAX: not yet) */
    int cached_tokens;              /* prompt positions the prompt cache held (before the first token) */
    char *prediction;               /* prediction.content (OpenAI's Predicted Outputs; malloc'd, NULL: none) */
    int pred_drafted, pred_accepted; /* its tokens drafted and taken (pm_callbacks.on_prediction) */

    struct MHD_Connection *conn;    /* set while parked */
    int parked, wait_mask;

    /* streaming writer state (the connection's thread, under mu) */
    size_t sent;                    /* bytes of text already put into events */
    int lps_sent;                   /* log-probability entries already put into events */
    int sse_phase;
    srv_call_reader calls_read;     /* chat tools: the calls held to their schema, read as they stream */
    int resp_seq, resp_msg;         /* /v1/responses: the next event's sequence_number; its message item: 0 none, 1 open, 2 done */
    char *wire;
    size_t wire_len, wire_off, wire_cap;
};

/* A new job with one reference (the HTTP connection's). NULL on OOM. */
srv_job *srv_job_new(srv_ctx *ctx, srv_job_kind kind);
void srv_job_ref(srv_job *j);
/* Drops a reference; the last one frees everything. */
void srv_job_unref(srv_job *j);
/* Frees the decoded media (after admission, or when the job ends unadmitted) and gives its bytes
 * back to the server's media budget. */
void srv_job_free_media(srv_job *j);
/* The gate the HTTP thread decodes this job's media through: every byte of samples and pixels is
 * counted against ctx->req_budget before it is allocated (1: not now, 2: never for this request). */
const pm_media_gate *srv_job_media_gate(srv_job *j);
/* When a decode failed with rc because the media budget refused it: fills e (503 overloaded for
 * "not now", 413 media_too_large for "never") and returns 1; else 0. */
int srv_job_media_refusal(srv_job *j, int rc, const char *what, srv_error *e);

/* With mu held: when the condition in `mask` is not yet met, suspends conn and returns 1 (the
 * caller must return MHD_YES and will be called again after resume); else returns 0. */
int srv_job_park_locked(srv_job *j, struct MHD_Connection *conn, int mask);
/* With mu held: resumes the parked connection if it waits for `event`. */
void srv_job_notify_locked(srv_job *j, int event);

/* With tools auto: whether what follows the model's <|tool_call|> is held to the calls' schema
 * (it compiled, and the tokenizer has both markers); else the calls are only read. */
int srv_job_lazy_calls(const srv_job *j);

/* Inference-thread events. */
void srv_job_admitted(srv_job *j, int64_t seq_id);
/* Ends an unadmitted job with an error (the HTTP side answers e->http). */
void srv_job_reject(srv_job *j, const srv_error *e);
int srv_job_on_token(srv_job *j, int32_t token, const char *text, size_t len);
/* A generated token's log-probabilities (before its on_token); dropped if memory runs out. */
void srv_job_on_logprobs(srv_job *j, pm_logprob chosen, const pm_logprob *top, int n_top);
void srv_job_on_prompt_logprobs(srv_job *j, int pos, pm_logprob chosen, const pm_logprob *top, int n_top);
/* The prompt positions the prompt cache held (right before on_done). */
void srv_job_on_prompt_cached(srv_job *j, int positions);
void srv_job_on_prediction(srv_job *j, int drafted, int accepted);
void srv_job_on_error(srv_job *j, int code);
void srv_job_on_done(srv_job *j, pm_finish reason, int prompt_tokens, int completion_tokens, const char *error);
/* A job that ended without its answer (PM_FINISH_ERROR or CANCELLED): the error to answer, by the
 * error's class (the request's grammar past a limit 400, the engine's failure 5xx). */
void srv_job_failure(const srv_job *j, srv_error *e);

/* The connection is finished (ok = completed normally): forget it, and cancel generation when the
 * job is not done. */
void srv_job_detach(srv_job *j, int ok);

/* "stop" / "length" for the API. */
const char *srv_finish_name(pm_finish f);

#endif
