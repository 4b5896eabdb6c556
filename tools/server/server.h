/* server.h — shared types of `phi4mm serve`, the OpenAI-compatible HTTP server.
 *
 * Layout (one job per file):
 *   cmd_serve.c    options, model loading, lifecycle (signals, orderly shutdown): srv_instance (instance.h)
 *   run_batch.c    `phi4mm run-batch`: an OpenAI Batch file sent to a server of its own, a result line each
 *   http.c         libmicrohttpd glue: routing, bounded bodies, auth, CORS, responses, suspend/resume
 *   routes_chat.c  POST /v1/chat/completions, /v1/completions: request -> job, job -> JSON / SSE
 *   routes_audio.c POST /v1/audio/transcriptions|translations
 *   routes_info.c  GET /v1/models, /health, /metrics
 *   routes_tokens.c POST /tokenize, /detokenize
 *   chat_parse.c   chat / completions request JSON -> prompt + media bytes (pure; unit-tested)
 *   audio_form.c   multipart fields -> transcription request (pure; unit-tested)
 *   multipart.c, base64.c, dataurl.c, json_util.c   small bounded parsers (unit-tested)
 *   routes_responses.c, responses_parse.c, responses_sse.c, response_store.c, response_items.c
 *                  POST/GET/DELETE /v1/responses: input items -> chat, events, kept conversations
 *   tool_calls.c, call_reader.c, logprobs.c, subtitles.c   function calls, log-probabilities, srt / vtt
 *   req_memory.c   the budget of request bodies and decoded media (--max-request-memory)
 *   local_media.c  image_url file paths under --allow-media-dir
 *   media_urls.c   which image URLs may be fetched (--allow-media-hosts), the table of what was (pure)
 *   media_fetch.c  a request's image URLs fetched with libcurl on a thread of its own, connection parked
 *   job.c          the request object shared by an HTTP connection and the inference thread
 *   scheduler.c    the inference thread: bounded queue, admission, cancellation, stepping
 *   sse.c          server-sent events: chat chunks and transcript events, the streaming reader
 *   metrics.c      counters, gauges, the time-to-first-token histogram, Prometheus text
 *
 * Threads: libmicrohttpd's worker threads parse requests, decode media and write responses; one
 * inference thread owns the pm_engine. They meet only in srv_job (mutex-protected) and in the
 * scheduler's queue. Nothing here is global: everything hangs off srv_ctx. */
#ifndef PM_SERVER_H
#define PM_SERVER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "phi4mm.h"

/* An error to send as {"error": {"message", "type", "param", "code"}} with an HTTP status. */
typedef struct srv_error {
    int http;           /* 400, 401, 404, 405, 413, 503, 500, ... */
    char type[40];      /* invalid_request_error, authentication_error, server_error, ... */
    char param[160];    /* the offending request field, "" for null */
    char code[48];      /* machine-readable code, "" for null */
    char msg[640];
} srv_error;

/* Fills e and returns -1 (so parsers can `return srv_fail(...)`). param/code may be NULL. */
int srv_fail(srv_error *e, int http, const char *type, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Shorthand for a 400 invalid_request_error. */
int srv_bad(srv_error *e, const char *param, const char *code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Fills e for an engine status rc (a pm_status) and its message: the request's fault (bad input,
 * a limit, a context that does not fit) 400, no capacity or memory 503, anything else 500. */
void srv_status_error(int rc, const char *msg, srv_error *e);

typedef struct srv_opts {
    const char *model_dir;
    pm_load_options load;       /* --weights */
    const char *model_name;     /* id reported by /v1/models (default: the model directory's name) */
    const char *host;           /* default 127.0.0.1 */
    int port;                   /* default 8080; 0 = pick a free port (printed) */
    const char *api_key;        /* NULL: no auth */
    const char *cors_origin;    /* NULL: no CORS headers */
    const char *tls_cert, *tls_key; /* --tls-cert / --tls-key PEM files: HTTPS (NULL: plain HTTP) */
    const char *media_dir;      /* NULL: local media paths refused */
    const char *media_hosts;    /* --allow-media-hosts LIST: hosts image URLs are fetched from (NULL: none) */
    int media_fetch_timeout;    /* seconds for all of a request's URLs (default 30) */
    int max_crops;              /* --max-crops: HD crops per image at most unless a request says (0: the checkpoint's) */
    int parallel;               /* engine max_seqs (default 16) */
    int max_queue;              /* waiting requests (default 64) */
    int http_threads;           /* libmicrohttpd worker threads (default 4) */
    int default_max_tokens;     /* completion cap when a request names none (default 1024) */
    int max_model_len;          /* --max-model-len: prompt + completion tokens per request (0: the checkpoint's) */
    int prefill_chunk;          /* engine prompt rows per step (default 512) */
    int prompt_threads;         /* encoders + prefill of new requests: < 0 auto (default: a thread of their
                                   own, half the OpenMP threads while sequences are live), 0 inline, N */
    int inline_prompt_max;      /* a text request of at most this many prompt tokens is admitted at once,
                                   prefilled by the steps, when the prompt thread is busy (default 64; 0: never) */
    size_t max_body;            /* bytes (default 64 MiB) */
    int64_t kv_budget;          /* engine KV budget in bytes: 0 = auto (default), < 0 = none */
    int64_t prompt_cache;       /* prompt cache bytes (pm_engine_opts.prefix_cache): < 0 = auto (default), 0 = off */
    size_t response_store;      /* /v1/responses conversations kept for previous_response_id, bytes (default 64 MiB; 0: off) */
    int draft_tokens;           /* pm_engine_opts.draft_tokens (0: off, the default) */
    int kv_bf16;                /* --kv-cache bf16: pm_engine_opts.kv_bf16 */
    int64_t max_request_memory;   /* decoded media held by all requests, bytes: 0 = auto (default) */
    int retry_after;            /* seconds, sent with 503 (default 1) */
    const char *port_file;      /* optional: write the bound port here once listening */
    int quiet;                  /* no per-request log lines */
    int strict_params;          /* --strict-params: a chat / completions body field nothing reads is a 400 (OpenAI's way) */
} srv_opts;

void srv_opts_default(srv_opts *o);

typedef struct srv_sched srv_sched;
typedef struct srv_metrics srv_metrics;
typedef struct srv_job srv_job;
typedef struct srv_response_store srv_response_store;
typedef struct srv_media_hosts srv_media_hosts;
typedef struct srv_fetch_pool srv_fetch_pool;

/* The server: options, model, scheduler, metrics. `ready` flips to 1 once the model is loaded and
 * the scheduler runs; until then model endpoints answer 503 "loading". */
typedef struct srv_ctx {
    srv_opts o;
    char model_id[128];
    pm_model *model;
    pm_limits limits;
    int max_context;            /* the model's max_position_embeddings: no request may ask for more */
    int32_t tool_call_open;     /* the ids of <|tool_call|> and <|/tool_call|> (-1: the tokenizer has none) */
    int32_t tool_call_close;
    const struct srv_mhd *mhd;  /* libmicrohttpd's functions (mhd_lib.h), set by srv_http_start */
    srv_sched *sched;
    srv_metrics *metrics;
    srv_response_store *responses; /* NULL: --response-store off */
    atomic_int ready;
    atomic_int suspended;       /* connections parked right now (must reach 0 before stopping MHD) */
    srv_media_hosts *media_hosts; /* parsed --allow-media-hosts (NULL: remote URLs refused) */
    srv_fetch_pool *fetch_pool;   /* the threads that fetch media URLs (media_fetch.c) */
    atomic_int fetching;        /* requests whose image URLs are being fetched (media_fetch.c) */
    atomic_int stopping;        /* set at shutdown: transfers under way give up */
    atomic_uint_fast64_t next_id;
    int64_t req_budget;       /* bytes of decoded media (samples, pixels) all requests may hold */
    _Atomic int64_t req_used; /* held now, from the first decoded byte until the job's media are freed */
    uint64_t id_salt;
    int64_t started;            /* unix seconds */
} srv_ctx;

/* A fresh response id "<prefix>-<24 hex digits>". */
void srv_new_id(srv_ctx *c, const char *prefix, char *out, size_t cap);

/* Monotonic seconds. */
double srv_now(void);

#endif
