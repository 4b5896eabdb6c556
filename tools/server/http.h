/* http.h — the libmicrohttpd side of the server and the helpers routes answer with.
 *
 * Why libmicrohttpd: packaged in Debian, LGPL, small, no global state; its internal epoll thread
 * pool serves many concurrent SSE streams, and suspend/resume lets a stream wait for the
 * inference thread without busy-polling (measured: 1,000 concurrent SSE streams in 0.47 s). */
#ifndef PM_SRV_HTTP_H
#define PM_SRV_HTTP_H

#include <stddef.h>

#include "job.h"
#include "mhd_lib.h"
#include "server.h"

/* The path of a kept response's input items past its id. */
#define SRV_ITEMS_SUFFIX "/input_items"

typedef enum {
    SRV_R_NONE = 0,
    SRV_R_CHAT,
    SRV_R_COMPLETIONS,
    SRV_R_RESPONSES,
    SRV_R_TRANSCRIBE,
    SRV_R_TRANSLATE,
    SRV_R_MODELS,
    SRV_R_MODEL,      /* /v1/models/{id} */
    SRV_R_RESPONSE,   /* /v1/responses/{id}: GET, DELETE */
    SRV_R_RESPONSE_ITEMS, /* /v1/responses/{id}/input_items (SRV_ITEMS_SUFFIX): GET */
    SRV_R_HEALTH,
    SRV_R_METRICS,
    SRV_R_VERSION,
    SRV_R_TOKENIZE,
    SRV_R_DETOKENIZE,
} srv_route;

/* Per-request state (libmicrohttpd's con_cls). */
typedef struct srv_conn {
    srv_route route;
    const char *endpoint;   /* metrics label */
    char method[16];
    char path[160];
    char content_type[160];
    char *body;
    size_t len, cap;
    size_t discarded;       /* bytes dropped past the body cap */
    int64_t body_taken;     /* bytes of ctx->req_budget the body buffer holds */
    int too_big;
    int no_room;            /* the body could not be buffered: 2 never (over the whole budget), 1 not now */
    int responded, status;
    int mode;               /* pm_mode for metrics, -1 unknown */
    double t0;
    srv_job **jobs;         /* once accepted: one a choice (n, or several completions prompts) */
    int n_jobs;
    struct srv_fetch *fetch; /* the request's remote image URLs, fetched or being fetched (media_fetch.h) */
    char ignored[200];      /* body fields no route reads (srv_ignored_fields): X-Ignored-Fields and the log line */
} srv_conn;

typedef struct srv_http srv_http;

/* Binds ctx->o.host:ctx->o.port and starts the worker threads. Returns 0 or -1 with a message. */
int srv_http_start(srv_http **out, srv_ctx *ctx, char *err, size_t errlen);
int srv_http_port(const srv_http *h);
/* Stops accepting new connections (existing ones continue). */
void srv_http_quiesce(srv_http *h);
/* Waits (bounded) for parked connections to be resumed, then stops the daemon. */
void srv_http_stop(srv_http *h);

/* Frees the buffered body and gives its bytes back to the request-memory budget. */
void srv_conn_free_body(srv_ctx *ctx, srv_conn *sc);

/* Responses. Each takes ownership of `body` (malloc'd), records metrics and returns what the
 * access handler must return. */
enum MHD_Result srv_respond(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, int status, const char *content_type, char *body,
                            size_t len);
enum MHD_Result srv_respond_error(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, const srv_error *e);
/* o as a JSON body (o is taken; NULL, or a failed dump: a 500 "out of memory"). */
enum MHD_Result srv_respond_json(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, int status, json_t *o);
/* Hands a request's jobs (one a choice; the array and the references are taken in every case) to
 * the scheduler, all or none (503 + Retry-After when the queue has no room), and serves them. */
enum MHD_Result srv_submit_jobs(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, srv_job **jobs, int n);
enum MHD_Result srv_submit_job(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, srv_job *j);
/* Serves the accepted jobs: parks until there is something to answer, then answers (a stream has
 * one job). */
enum MHD_Result srv_serve_job(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc);

/* Routes (routes_*.c). Called on the final access-handler call, possibly again after a resume. */
enum MHD_Result srv_route_chat(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc);
enum MHD_Result srv_route_completions(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc);
enum MHD_Result srv_route_audio(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, int translate);
enum MHD_Result srv_route_models(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, const char *id);
enum MHD_Result srv_route_health(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc);
enum MHD_Result srv_route_version(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc);
enum MHD_Result srv_route_metrics(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc);
enum MHD_Result srv_route_tokenize(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc);
enum MHD_Result srv_route_detokenize(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc);
enum MHD_Result srv_route_responses(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc);
/* GET /v1/responses/{id} (the response object kept) and DELETE (forgets it), for the cache_salt
 * query parameter's salt (none: entries kept without one). */
enum MHD_Result srv_route_response_stored(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc);

/* A body's fields that nothing reads, n of them, named in sc->ignored (X-Ignored-Fields and the log
 * line, as vLLM logs them): refused with a 400 unknown_parameter under serve --strict-params (as
 * OpenAI refuses them); 0 otherwise. */
int srv_refuse_ignored(const srv_ctx *ctx, const srv_conn *sc, int n, srv_error *e);

/* What a request's media may be (counts, bytes, where from) under ctx's options. */
struct srv_parse_limits srv_request_limits(const srv_ctx *ctx);

/* The job of choice `index` (sample `sample` of its prompt) of a parsed chat or completions
 * request: what it needs of r is copied and r's media decoded into it. NULL with e set. */
struct srv_chat_req;
srv_job *srv_chat_job(srv_ctx *ctx, const struct srv_chat_req *r, srv_job_kind kind, int index, int sample, srv_error *e);

/* Final (non-streamed) bodies of a request's finished jobs, a choice each (in index order). */
char *srv_chat_result(srv_job *const *jobs, int n, const char *model, size_t *len);
char *srv_completion_result(srv_job *const *jobs, int n, const char *model, size_t *len);
/* {"prompt_tokens", "completion_tokens", "total_tokens"} of a request's jobs (chat and completions,
 * final and streamed): each prompt's tokens once, every choice's completion. */
json_t *srv_usage_json(srv_job *const *jobs, int n);
/* {"id", "object", "created", "model", "system_fingerprint", "choices": [choice]}: an answer's or a
 * streamed chunk's envelope (takes choice). */
json_t *srv_choice_object(const srv_job *j, const char *object, const char *model, json_t *choice);
/* Transcriptions (routes_audio.c): the answer of a request's jobs (the clip whole, or its pieces
 * under chunking_strategy, in order); the transcript (one job's text as it is, pieces' trimmed and
 * joined by a space; malloc'd); [*a, *b) of t without the ASCII whitespace at its ends; the usage
 * {"type": "tokens", "input_tokens", "output_tokens", "total_tokens"} over every piece (with
 * include[] logprobs, "logprobs": every piece's token entries in order). */
char *srv_audio_result(srv_job *const *jobs, int n, size_t *len, const char **content_type);
char *srv_transcript_text(srv_job *const *jobs, int n, size_t *len);
void srv_trim_space(const char *t, size_t *a, size_t *b);
json_t *srv_transcript_usage(srv_job *const *jobs, int n);
/* include[] logprobs: the entries [from, to) of a job's tokens as [{"token", "logprob", "bytes"}];
 * every piece's, in order. */
json_t *srv_transcript_logprobs(const srv_job *j, int from, int to);
json_t *srv_transcript_logprobs_all(srv_job *const *jobs, int n);

/* Streaming (sse.c): a job's sse_phase is SSE_END once its last event is in its wire. */
enum { SSE_START = 0, SSE_RUNNING = 1, SSE_END = 2 };
/* The response that streams a request's choices, one after the other (it takes a reference to
 * each job; a choice that ends early cancels the rest). NULL on OOM. */
struct MHD_Response *srv_sse_response(const srv_mhd *mhd, srv_job *const *jobs, int n, struct MHD_Connection *c);
/* What sse.c shares with responses_sse.c (the job's mu held): an event (with an "event: name"
 * line when name is given; takes v); whether a job ended with an answer; a chat answer with
 * tools' progress: the bytes of text that may go out as content (*ready), once it ended its calls
 * (*calls, a new reference or NULL), and whether calls stream (*held); the delta.tool_calls
 * entries of what its calls gained since they last went out (final: its calls once it ended). */
void srv_sse_event(srv_job *j, const char *name, json_t *v);
int srv_sse_ended_well(const srv_job *j);
void srv_sse_tools_progress(srv_job *j, size_t *ready, json_t **calls, int *held);
json_t *srv_sse_call_deltas(srv_job *j, const json_t *final);
/* A /v1/responses job's next events (responses_sse.c). */
void srv_sse_fill_response(srv_job *j, const char *model);

/* /v1/responses (routes_responses.c): the response object of a job (final: its output and usage;
 * else in progress), its non-streamed body, and its items (status "completed", ...; the message
 * takes logprobs, NULL: none). */
json_t *srv_response_object(const srv_job *j, const char *model, int final);
char *srv_response_result(srv_job *j, const char *model, size_t *len);
/* Keeps the conversation the response ended (the job's, with the response's output as the
 * assistant's message) for previous_response_id, once, when the request asked to store it. */
void srv_response_keep(srv_job *j, const json_t *response);
/* An item's id: "<prefix>_<hex of the response id>", "_<k>" added when k >= 0. */
void srv_response_item_id(const srv_job *j, const char *prefix, long k, char *out, size_t cap);
json_t *srv_response_message(const srv_job *j, const char *text, size_t len, const char *status, json_t *logprobs);
/* Log-probability entries [from, to) as an output_text part's logprobs (an empty array without),
 * and how many entries belong to the first `bytes` of the text (the tokens that began there). */
json_t *srv_response_logprobs(const srv_job *j, int from, int to);
int srv_response_lp_count(const srv_job *j, size_t bytes);
json_t *srv_response_call(const srv_job *j, size_t k, const char *call_id, const char *name, const char *args, size_t args_len,
                          const char *status);

#endif
