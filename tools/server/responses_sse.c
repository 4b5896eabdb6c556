/* responses_sse.c — a streamed /v1/responses answer as OpenAI's Responses events, each an
 * "event: <type>" line and its data with type and sequence_number (0, 1, ...):
 *   response.created, response.in_progress                    (the response, status in_progress)
 *   response.output_item.added, response.content_part.added   (the message, when text comes)
 *   response.output_text.delta ...
 *   response.output_text.done, response.content_part.done, response.output_item.done
 *   per call: response.output_item.added (a function_call item, once its name is complete: calls
 *   held to their schema stream as they are written, sse.c), response.function_call_arguments.delta
 *   ..., at the end response.function_call_arguments.done, response.output_item.done
 *   response.completed | response.incomplete (max_output_tokens) | response.failed (an error, a
 *   cancellation), with the whole response: the same object a non-streamed request gets.
 * The message comes first and is done before the first call begins (text only goes out before
 * the calls); an answer of calls only has no message, an answer without calls always has one. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "http.h"
#include "json_util.h"
#include "tool_calls.h"

static json_t *event(srv_job *j, const char *type) {
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(j->resp_seq++));
    return o;
}

static void emit(srv_job *j, json_t *o) { srv_sse_event(j, json_string_value(json_object_get(o, "type")), o); }

static void item_event(srv_job *j, const char *type, int index, json_t *item) {
    json_t *o = event(j, type);
    json_object_set_new(o, "output_index", json_integer(index));
    json_object_set_new(o, "item", item);
    emit(j, o);
}

/* An event about the message's text part (output 0, content 0). */
static json_t *part_event(srv_job *j, const char *type, const char *msg_id) {
    json_t *o = event(j, type);
    json_object_set_new(o, "item_id", json_string(msg_id));
    json_object_set_new(o, "output_index", json_integer(0));
    json_object_set_new(o, "content_index", json_integer(0));
    return o;
}

static void message_open(srv_job *j) {
    if (j->resp_msg) return;
    j->resp_msg = 1;
    json_t *item = srv_response_message(j, "", 0, "in_progress", NULL);
    json_t *part = json_incref(json_array_get(json_object_get(item, "content"), 0));
    json_array_clear(json_object_get(item, "content"));
    char id[64];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(item, "id")));
    item_event(j, "response.output_item.added", 0, item);
    json_t *o = part_event(j, "response.content_part.added", id);
    json_object_set_new(o, "part", part);
    emit(j, o);
}

/* The message item's closing events, from its final form. */
static void message_done(srv_job *j, const json_t *item) {
    const char *id = json_string_value(json_object_get(item, "id"));
    const json_t *part = json_array_get(json_object_get(item, "content"), 0);
    json_t *o = part_event(j, "response.output_text.done", id);
    json_object_set_new(o, "text", json_deep_copy(json_object_get(part, "text")));
    json_object_set_new(o, "logprobs", json_deep_copy(json_object_get(part, "logprobs")));
    emit(j, o);
    o = part_event(j, "response.content_part.done", id);
    json_object_set_new(o, "part", json_deep_copy(part));
    emit(j, o);
    item_event(j, "response.output_item.done", 0, json_deep_copy(item));
    j->resp_msg = 2;
}

static void args_delta(srv_job *j, size_t k, const json_t *args) {
    if (!json_string_length(args)) return;
    char id[64];
    srv_response_item_id(j, "fc", (long)k, id, sizeof id);
    json_t *o = event(j, "response.function_call_arguments.delta");
    json_object_set_new(o, "item_id", json_string(id));
    json_object_set_new(o, "output_index", json_integer((j->resp_msg ? 1 : 0) + (json_int_t)k));
    json_object_set_new(o, "delta", json_deep_copy(args));
    emit(j, o);
}

/* delta.tool_calls entries (sse.c) as items begun and argument deltas; the message, if any, is
 * done before the first call begins. */
static void call_events(srv_job *j, const json_t *deltas) {
    size_t i;
    const json_t *d;
    json_array_foreach(deltas, i, d) {
        size_t k = (size_t)json_integer_value(json_object_get(d, "index"));
        const json_t *f = json_object_get(d, "function"), *args = json_object_get(f, "arguments");
        const char *cid = json_string_value(json_object_get(d, "id"));
        if (cid) { /* a call begins */
            if (j->resp_msg == 1) {
                json_t *m = srv_response_message(j, j->text ? j->text : "", j->sent, "completed", srv_response_logprobs(j, 0, j->lps_sent));
                message_done(j, m);
                json_decref(m);
            }
            const char *name = json_string_value(json_object_get(f, "name"));
            item_event(j, "response.output_item.added", (j->resp_msg ? 1 : 0) + (int)k,
                       srv_response_call(j, k, cid, name ? name : "", "", 0, "in_progress"));
        }
        args_delta(j, k, args);
    }
}

/* The end: every item done as the final response holds it, then the response. */
static void finish(srv_job *j, const char *model) {
    json_t *r = srv_response_object(j, model, 1);
    if (!r) return;
    const char *status = json_string_value(json_object_get(r, "status"));
    size_t i;
    const json_t *item;
    json_array_foreach(json_object_get(r, "output"), i, item) {
        const char *type = json_string_value(json_object_get(item, "type"));
        if (!strcmp(type, "message")) { /* done already when a call began after it */
            if (j->resp_msg != 2) {
                message_open(j);
                message_done(j, item);
            }
            continue;
        }
        json_t *o = event(j, "response.function_call_arguments.done");
        json_object_set_new(o, "item_id", json_deep_copy(json_object_get(item, "id")));
        json_object_set_new(o, "output_index", json_integer((json_int_t)i));
        json_object_set_new(o, "name", json_deep_copy(json_object_get(item, "name")));
        json_object_set_new(o, "arguments", json_deep_copy(json_object_get(item, "arguments")));
        emit(j, o);
        item_event(j, "response.output_item.done", (int)i, json_deep_copy(item));
    }
    srv_response_keep(j, r);
    json_t *o = event(j, !strcmp(status, "completed") ? "response.completed" : !strcmp(status, "incomplete") ? "response.incomplete" : "response.failed");
    json_object_set_new(o, "response", r);
    emit(j, o);
}

void srv_sse_fill_response(srv_job *j, const char *model) {
    if (j->sse_phase == SSE_START) {
        json_t *r = srv_response_object(j, model, 0), *o = event(j, "response.created");
        json_object_set_new(o, "response", json_deep_copy(r));
        emit(j, o);
        o = event(j, "response.in_progress");
        json_object_set_new(o, "response", r);
        emit(j, o);
        j->sse_phase = SSE_RUNNING;
    }
    int done = j->state == SRV_JS_DONE;
    if (done && !srv_sse_ended_well(j)) { /* no items are done: the response failed */
        json_t *o = event(j, "response.failed");
        json_object_set_new(o, "response", srv_response_object(j, model, 1));
        emit(j, o);
        j->sse_phase = SSE_END;
        return;
    }
    size_t ready = j->text_len;
    json_t *calls = NULL;
    int held = 0;
    if (j->tool_mode != SRV_TOOLS_OFF) srv_sse_tools_progress(j, &ready, &calls, &held);
    if (ready > j->sent) {
        message_open(j);
        char id[64];
        srv_response_item_id(j, "msg", -1, id, sizeof id);
        json_t *o = part_event(j, "response.output_text.delta", id);
        json_object_set_new(o, "delta", srv_json_text(j->text + j->sent, ready - j->sent));
        int lps = j->tool_mode == SRV_TOOLS_OFF ? j->n_lps : srv_response_lp_count(j, ready); /* the text's tokens since the last */
        json_object_set_new(o, "logprobs", srv_response_logprobs(j, j->lps_sent, lps));
        j->lps_sent = lps;
        emit(j, o);
        j->sent = ready;
    }
    json_t *deltas = calls || held ? srv_sse_call_deltas(j, calls) : NULL;
    if (deltas) call_events(j, deltas);
    json_decref(deltas);
    json_decref(calls);
    if (done) {
        finish(j, model);
        j->sse_phase = SSE_END;
    }
}
