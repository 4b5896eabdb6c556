/* sse.c — server-sent events for streamed jobs, and the libmicrohttpd content reader that sends
 * them. Events are "data: <json>\n\n".
 *
 * Chat (OpenAI chat.completion.chunk): a first chunk with the assistant role, one chunk per
 * piece of new text, a last chunk with the finish_reason (empty delta), then — with
 * stream_options.include_usage — a chunk with empty choices and the usage, then "data: [DONE]".
 * With include_usage every chunk carries "usage": null, as OpenAI sends it; with vLLM's
 * continuous_usage_stats beside it, its choice's usage so far instead.
 * Completions (text_completion): the same without the role chunk, each choice {"text": piece}.
 * With logprobs, a text chunk (or the finish chunk) carries the entries of the tokens recorded
 * since the previous one (logprobs.h), so that every generated token's entry is sent once.
 * Transcriptions: {"type":"transcript.text.delta","delta":...} per piece, then
 * {"type":"transcript.text.done","text":<all>,"usage":{...}}. The pieces of a long clip
 * (chunking_strategy) stream in order as one transcript: each without the whitespace at its ends
 * (trailing whitespace waits until text follows it), a space between them, so that the deltas
 * add up to the done event's text. With include[] logprobs a delta carries the entries of the
 * tokens since the last one, and the done event all of them.
 * A sequence that ends in an error (or is cancelled by a server shutdown) ends its stream with
 * data: {"error": {...}} (then [DONE] for chat): every stream gets a final event.
 *
 * Several choices (n, or several completions prompts) stream one after the other, each choice's
 * chunks with its index and its own finish chunk (the others run meanwhile and their text waits in
 * their jobs); the usage chunk (with all the choices' tokens) and [DONE] come after the last. A
 * choice refused or failed ends the stream with its error event and [DONE].
 *
 * The reader copies prepared bytes from the current job's wire; when nothing is ready it parks the
 * connection (MHD_suspend_connection) on that job and the inference thread resumes it when text or
 * the end arrives. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "json_util.h"
#include "logprobs.h"
#include "tool_calls.h"

typedef struct srv_stream {
    srv_job **jobs; /* the request's choices, streamed in turn (a reference each) */
    int n, cur;
    int said, piece_said;           /* transcript pieces: any text sent; any of the current piece's */
    struct MHD_Connection *c;
} srv_stream;

static void wire_put(srv_job *j, const char *s, size_t n) {
    if (j->wire_len + n > j->wire_cap) {
        size_t cap = j->wire_cap ? j->wire_cap : 1024;
        while (cap < j->wire_len + n) cap *= 2;
        char *w = realloc(j->wire, cap);
        if (!w) return; /* the event is lost; the stream still ends */
        j->wire = w;
        j->wire_cap = cap;
    }
    memcpy(j->wire + j->wire_len, s, n);
    j->wire_len += n;
}

void srv_sse_event(srv_job *j, const char *name, json_t *v) {
    size_t n = 0;
    char *s = srv_json_dump(v, &n);
    if (!s) {
        json_decref(v);
        return;
    }
    if (name) { /* it may live in v */
        wire_put(j, "event: ", 7);
        wire_put(j, name, strlen(name));
        wire_put(j, "\n", 1);
    }
    wire_put(j, "data: ", 6);
    wire_put(j, s, n);
    wire_put(j, "\n\n", 2);
    free(s);
    json_decref(v);
}

static void wire_event(srv_job *j, json_t *v) { srv_sse_event(j, NULL, v); }

/* One streamed chunk of object `object` around choice ch (index, logprobs, finish_reason added). */
static json_t *chunk(const srv_job *j, const char *model, const char *object, json_t *ch, const char *finish) {
    json_object_set_new(ch, "index", json_integer(j->index));
    json_object_set_new(ch, "logprobs", json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *o = srv_choice_object(j, object, model, ch);
    if (j->continuous_usage) { /* this choice's so far: the prompt as planned, the tokens come (the engine's count once done) */
        int done = j->state == SRV_JS_DONE, p = done ? j->prompt_tokens : j->plan_tokens, c = done ? j->completion_tokens : j->n_tokens;
        json_object_set_new(o, "usage", json_pack("{s:i, s:i, s:i}", "prompt_tokens", p, "completion_tokens", c, "total_tokens", p + c));
    } else if (j->include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* A chunk carrying text (NULL: none, for the finish and usage chunks), chat's or completions'. */
static json_t *chat_chunk(const srv_job *j, const char *model, json_t *text, const char *finish) {
    json_t *d = json_object(), *ch = json_object();
    if (text) json_object_set_new(d, "content", text);
    json_object_set_new(ch, "delta", d);
    return chunk(j, model, "chat.completion.chunk", ch, finish);
}

static json_t *text_chunk(const srv_job *j, const char *model, json_t *text, const char *finish) {
    json_t *ch = json_object();
    json_object_set_new(ch, "text", text ? text : json_string(""));
    return chunk(j, model, "text_completion", ch, finish);
}

static json_t *error_event(const srv_job *j) {
    srv_error e;
    if (j->failed) e = j->err; /* refused before admission (a later choice of a stream) */
    else srv_job_failure(j, &e);
    json_t *err = json_object();
    json_object_set_new(err, "message", json_string(e.msg));
    json_object_set_new(err, "type", json_string(e.type));
    json_object_set_new(err, "param", json_null());
    json_object_set_new(err, "code", json_string(e.code));
    json_t *o = json_object();
    json_object_set_new(o, "error", err);
    return o;
}

/* The log-probability entries not yet sent go with chunk o. */
static json_t *with_logprobs(srv_job *j, json_t *o) {
    if (!j->logprobs || j->lps_sent >= j->n_lps) return o;
    json_object_set_new(json_array_get(json_object_get(o, "choices"), 0), "logprobs", srv_logprobs_json(j, j->lps_sent, j->n_lps));
    j->lps_sent = j->n_lps;
    return o;
}

/* A choice that ended well: the stream goes on to the next one, if any. */
int srv_sse_ended_well(const srv_job *j) { return !j->failed && (j->finish == PM_FINISH_STOP || j->finish == PM_FINISH_LENGTH); }

/* Once the job is done: the finish chunk (finish_reason `finish`), and after the stream's last
 * choice the usage chunk (include_usage) and [DONE]; or the error event and [DONE]. */
static void fill_end(srv_job *j, const char *model, json_t *(*mk)(const srv_job *, const char *, json_t *, const char *),
                     const srv_stream *st, const char *finish) {
    j->sse_phase = SSE_END;
    if (!srv_sse_ended_well(j)) {
        wire_event(j, error_event(j));
    } else {
        wire_event(j, with_logprobs(j, mk(j, model, NULL, finish)));
        if (st->cur + 1 < st->n) return; /* the next choice follows */
        if (j->include_usage) { /* every earlier choice has ended: the stream went through them */
            json_t *o = mk(j, model, NULL, NULL);
            json_object_set_new(o, "choices", json_array());
            json_object_set_new(o, "usage", srv_usage_json(st->jobs, st->n));
            wire_event(j, o);
        }
    }
    wire_put(j, "data: [DONE]\n\n", 14);
}

/* The new text as one chunk (with the log-probabilities recorded since the last), then the end. */
static void fill_openai(srv_job *j, const char *model, json_t *(*mk)(const srv_job *, const char *, json_t *, const char *),
                        const srv_stream *st) {
    j->sse_phase = SSE_RUNNING;
    if (j->text_len > j->sent) {
        wire_event(j, with_logprobs(j, mk(j, model, srv_json_text(j->text + j->sent, j->text_len - j->sent), NULL)));
        j->sent = j->text_len;
    }
    if (j->state == SRV_JS_DONE) fill_end(j, model, mk, st, srv_finish_name(j->finish));
}

/* The delta.tool_calls entries of what the calls gained since they last went out: a call's first
 * entry carries its index, id, type, name and the arguments so far, later ones the arguments that
 * came since. final: the answer's calls once it ended (srv_tool_calls_find), which complete what
 * the reader saw; NULL while it streams (then only calls whose name is complete go out). NULL when
 * nothing is new. */
json_t *srv_sse_call_deltas(srv_job *j, const json_t *final) {
    srv_call_reader *r = &j->calls_read;
    json_t *out = json_array();
    size_t n = final ? json_array_size(final) : (size_t)r->n;
    for (size_t k = 0; k < n && out; k++) {
        srv_call_part *p = k < (size_t)r->n ? &r->calls[k] : NULL;
        const char *name, *args;
        size_t args_len;
        if (final) {
            const json_t *f = json_object_get(json_array_get(final, k), "function");
            name = json_string_value(json_object_get(f, "name"));
            args = json_string_value(json_object_get(f, "arguments"));
            args_len = json_string_length(json_object_get(f, "arguments"));
        } else {
            if (!p->name_done) break;
            name = p->name;
            args = p->args ? p->args : "";
            args_len = p->args_len;
        }
        int header = !p || !p->header_sent;
        size_t sent = header ? 0 : p->args_sent < args_len ? p->args_sent : args_len;
        if (!header && sent == args_len) continue;
        json_t *d = json_object(), *f = json_object();
        json_object_set_new(d, "index", json_integer((json_int_t)k));
        if (header) {
            char cid[96];
            srv_tool_call_id(cid, sizeof cid, j->id, j->index, k);
            json_object_set_new(d, "id", json_string(cid));
            json_object_set_new(d, "type", json_string("function"));
            json_object_set_new(f, "name", json_string(name ? name : ""));
        }
        json_object_set_new(f, "arguments", srv_json_text(args ? args + sent : "", args ? args_len - sent : 0));
        json_object_set_new(d, "function", f);
        json_array_append_new(out, d);
        if (p) p->header_sent = 1, p->args_sent = args_len;
    }
    if (json_array_size(out)) return out;
    json_decref(out);
    return NULL;
}

void srv_sse_tools_progress(srv_job *j, size_t *ready, json_t **calls, int *held) {
    const char *text = j->text ? j->text : "";
    int forced = j->tool_mode == SRV_TOOLS_FORCED;
    *held = forced || (j->tool_at != SIZE_MAX && srv_job_lazy_calls(j));
    if (*held)
        srv_call_reader_read(&j->calls_read, text, forced ? 0 : j->tool_at, j->tool_end < j->text_len ? j->tool_end : j->text_len);
    int streaming = j->calls_read.n > 0 && j->calls_read.calls[0].header_sent;
    *ready = forced ? 0 : srv_tool_content_ready(text, j->text_len, j->tool_at);
    *calls = NULL;
    if (j->state != SRV_JS_DONE) return;
    size_t content_len = j->text_len;
    if (srv_sse_ended_well(j) && j->finish == PM_FINISH_STOP)
        *calls = srv_tool_calls_find(text, j->text_len, j->tool_mode, j->tool_at, j->tool_end, j->id, j->index, &content_len);
    *ready = *calls || !streaming ? content_len : forced ? 0 : j->tool_at;
    *held = *held && streaming; /* once ended, only what began to stream goes on as calls */
}

/* A chat answer with tools (tool_calls.h): what srv_sse_tools_progress lets out, as content and
 * delta.tool_calls. finish_reason "tool_calls" when the answer's calls were read. */
static void fill_chat_tools(srv_job *j, const char *model, const srv_stream *st) {
    j->sse_phase = SSE_RUNNING;
    size_t ready;
    json_t *calls;
    int held, done = j->state == SRV_JS_DONE;
    srv_sse_tools_progress(j, &ready, &calls, &held);
    if (ready > j->sent) {
        wire_event(j, with_logprobs(j, chat_chunk(j, model, srv_json_text(j->text + j->sent, ready - j->sent), NULL)));
        j->sent = ready;
    }
    json_t *deltas = calls || held ? srv_sse_call_deltas(j, calls) : NULL;
    if (deltas) {
        json_t *o = chat_chunk(j, model, NULL, NULL);
        json_object_set_new(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "delta"), "tool_calls", deltas);
        wire_event(j, with_logprobs(j, o));
    }
    int found = calls != NULL;
    json_decref(calls);
    if (done) fill_end(j, model, chat_chunk, st, found ? "tool_calls" : srv_finish_name(j->finish));
}

static void fill_chat(srv_job *j, const char *model, const srv_stream *st) {
    if (j->sse_phase == SSE_START && !j->failed) {
        json_t *o = chat_chunk(j, model, json_string(""), NULL);
        json_t *d = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "delta");
        json_object_set_new(d, "role", json_string("assistant"));
        wire_event(j, o);
    }
    if (j->tool_mode != SRV_TOOLS_OFF) fill_chat_tools(j, model, st);
    else fill_openai(j, model, chat_chunk, st);
}

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static void fill_transcript(srv_job *j, srv_stream *st) {
    j->sse_phase = SSE_RUNNING;
    size_t upto = j->text_len;
    const char *sep = "";
    if (st->n > 1) { /* a piece: trimmed, after a space */
        while (upto > j->sent && is_space(j->text[upto - 1])) upto--;
        if (!st->piece_said)
            while (j->sent < upto && is_space(j->text[j->sent])) j->sent++;
        if (upto > j->sent && !st->piece_said && st->said) sep = " ";
    }
    if (upto > j->sent) {
        json_t *o = json_object();
        json_object_set_new(o, "type", json_string("transcript.text.delta"));
        size_t n = upto - j->sent;
        char *joined = sep[0] ? malloc(n + 1) : NULL; /* the space, then the piece's bytes */
        if (joined) joined[0] = ' ', memcpy(joined + 1, j->text + j->sent, n);
        json_object_set_new(o, "delta", joined ? srv_json_text(joined, n + 1) : srv_json_text(j->text + j->sent, n));
        free(joined);
        if (j->logprobs) { /* the entries of the tokens since the last delta */
            json_object_set_new(o, "logprobs", srv_transcript_logprobs(j, j->lps_sent, j->n_lps));
            j->lps_sent = j->n_lps;
        }
        wire_event(j, o);
        j->sent = upto;
        st->said = st->piece_said = 1;
    }
    if (j->state != SRV_JS_DONE) return;
    j->sse_phase = SSE_END;
    if (!srv_sse_ended_well(j)) {
        wire_event(j, error_event(j));
        return;
    }
    if (st->cur + 1 < st->n) return; /* the next piece follows */
    size_t len = 0;
    char *text = srv_transcript_text(st->jobs, st->n, &len);
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("transcript.text.done"));
    json_object_set_new(o, "text", srv_json_text(text ? text : "", text ? len : 0));
    if (j->logprobs) json_object_set_new(o, "logprobs", srv_transcript_logprobs_all(st->jobs, st->n));
    json_object_set_new(o, "usage", srv_transcript_usage(st->jobs, st->n));
    free(text);
    wire_event(j, o);
}

/* Fills the current job's wire with its next events (its mu held). */
static void fill_locked(srv_job *j, srv_stream *st) {
    if (j->sse_phase == SSE_END) return;
    const char *model = j->ctx->model_id;
    if (j->kind == SRV_JOB_CHAT) fill_chat(j, model, st);
    else if (j->kind == SRV_JOB_COMPLETION) fill_openai(j, model, text_chunk, st);
    else if (j->kind == SRV_JOB_RESPONSE) srv_sse_fill_response(j, model);
    else fill_transcript(j, st);
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_stream *st = cls;
    (void)pos;
    for (;;) {
        srv_job *j = st->jobs[st->cur];
        pthread_mutex_lock(&j->mu);
        if (j->wire_off == j->wire_len) {
            j->wire_off = j->wire_len = 0;
            fill_locked(j, st);
        }
        if (j->wire_off < j->wire_len) {
            size_t n = j->wire_len - j->wire_off;
            if (n > max) n = max;
            memcpy(buf, j->wire + j->wire_off, n);
            j->wire_off += n;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        if (j->sse_phase == SSE_END) {
            int next = srv_sse_ended_well(j) && st->cur + 1 < st->n;
            pthread_mutex_unlock(&j->mu);
            if (!next) return MHD_CONTENT_READER_END_OF_STREAM;
            st->cur++;
            st->piece_said = 0;
            continue;
        }
        srv_job_park_locked(j, st->c, SRV_WAIT_DATA); /* returns 0 only if data raced in: we are called again */
        pthread_mutex_unlock(&j->mu);
        return 0;
    }
}

static void reader_free(void *cls) {
    srv_stream *st = cls;
    for (int i = 0; i < st->n; i++) {
        srv_job *j = st->jobs[i];
        pthread_mutex_lock(&j->mu);
        int done = j->sse_phase == SSE_END && j->wire_off == j->wire_len;
        pthread_mutex_unlock(&j->mu);
        if (!done) atomic_store(&j->cancel, 1); /* the stream ended early: stop generating */
        srv_job_unref(j);
    }
    free(st->jobs);
    free(st);
}

struct MHD_Response *srv_sse_response(const srv_mhd *mhd, srv_job *const *jobs, int n, struct MHD_Connection *c) {
    srv_stream *st = calloc(1, sizeof *st);
    if (!st || !(st->jobs = malloc(sizeof *st->jobs * (size_t)n))) {
        free(st);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        st->jobs[i] = jobs[i];
        srv_job_ref(jobs[i]);
    }
    st->n = n;
    st->c = c;
    struct MHD_Response *r = mhd->create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader, st, reader_free);
    if (!r) reader_free(st);
    return r;
}
