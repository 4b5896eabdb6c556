/* routes_responses.c — POST /v1/responses, OpenAI's Responses API, over the chat machinery: the
 * body becomes the chat request it amounts to (responses_parse.h), runs as one chat job (the same
 * template, media, adapters, tools, structured output and sampling), and the answer comes back
 * as a response object: a message item with its output_text, then a function_call item per call.
 * Streamed, as the Responses events (responses_sse.c). With store (the default) the conversation
 * it ended is kept (response_store.h) for a next request's previous_response_id, and for
 * GET /v1/responses/{id} (the response), its /input_items (response_items.h) and DELETE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "chat_parse.h"
#include "http.h"
#include "json_util.h"
#include "media_fetch.h"
#include "logprobs.h"
#include "response_items.h"
#include "response_store.h"
#include "responses_parse.h"
#include "tool_calls.h"

/* What a response object repeats of its request, as JSON text (the job keeps it). */
static char *response_base(const json_t *root, const srv_chat_req *r, const char *previous, int kept) {
    const json_t *v;
    json_t *o = json_object();
    json_object_set_new(o, "background", json_false());
    json_object_set_new(o, "error", json_null());
    json_object_set_new(o, "incomplete_details", json_null());
    v = json_object_get(root, "instructions");
    json_object_set_new(o, "instructions", json_is_string(v) ? json_incref((json_t *)v) : json_null());
    v = json_object_get(root, "max_output_tokens");
    json_object_set_new(o, "max_output_tokens", json_is_integer(v) ? json_incref((json_t *)v) : json_null());
    json_object_set_new(o, "output", json_array());
    v = json_object_get(root, "parallel_tool_calls");
    json_object_set_new(o, "parallel_tool_calls", json_boolean(!json_is_false(v)));
    json_object_set_new(o, "previous_response_id", previous ? json_string(previous) : json_null());
    json_object_set_new(o, "reasoning", json_pack("{s:n, s:n}", "effort", "summary"));
    json_object_set_new(o, "store", json_boolean(kept));
    json_object_set_new(o, "temperature", json_real(r->sampling.temperature));
    v = json_object_get(json_object_get(root, "text"), "format");
    json_object_set_new(o, "text", json_pack("{s:o}", "format", json_is_object(v) ? json_deep_copy(v) : json_pack("{s:s}", "type", "text")));
    v = json_object_get(root, "tool_choice");
    json_object_set_new(o, "tool_choice", v && !json_is_null(v) ? json_deep_copy(v) : json_string("auto"));
    v = json_object_get(root, "tools");
    json_object_set_new(o, "tools", json_is_array(v) ? json_deep_copy(v) : json_array());
    json_object_set_new(o, "top_p", json_real(r->sampling.top_p));
    json_object_set_new(o, "truncation", json_string("disabled"));
    json_object_set_new(o, "usage", json_null());
    v = json_object_get(root, "top_logprobs");
    json_object_set_new(o, "top_logprobs", json_is_integer(v) ? json_incref((json_t *)v) : json_null());
    v = json_object_get(root, "user");
    json_object_set_new(o, "user", json_is_string(v) ? json_incref((json_t *)v) : json_null());
    v = json_object_get(root, "metadata");
    json_object_set_new(o, "metadata", json_is_object(v) ? json_deep_copy(v) : json_object());
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static int check_metadata(const json_t *root, srv_error *e) {
    const json_t *m = json_object_get(root, "metadata");
    if (!m || json_is_null(m)) return 0;
    if (!json_is_object(m) || json_object_size(m) > 16)
        return srv_bad(e, "metadata", "invalid_value", "metadata must be an object of at most 16 string values");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)m, k, v) if (!json_is_string(v) || strlen(k) > 64 || json_string_length(v) > 512)
        return srv_bad(e, "metadata", "invalid_value", "metadata: keys of at most 64 and string values of at most 512 characters");
    return 0;
}

/* previous_response_id's conversation (chat messages) into *prev; -1 with e set. */
static int previous_conversation(srv_ctx *ctx, const json_t *root, const char **id, json_t **prev, srv_error *e) {
    *id = NULL;
    *prev = NULL;
    int got = srv_get_str(root, "previous_response_id", id, e);
    if (got <= 0) return got;
    if (!ctx->responses)
        return srv_bad(e, "previous_response_id", "unsupported_parameter",
                       "previous_response_id: this server keeps no responses (--response-store off); send the whole conversation in input");
    char *text = srv_response_store_get(ctx->responses, *id, json_string_value(json_object_get(root, "cache_salt")), 0);
    *prev = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (!*prev)
        return srv_bad(e, "previous_response_id", "invalid_value",
                       "previous_response_id '%.64s' was not found (not stored by this server, forgotten since, or kept under another "
                       "cache_salt)", *id);
    return 0;
}

/* A response id no client can guess from its own: "resp_" and 96 random bits. */
static void random_id(srv_ctx *ctx, char *out, size_t cap) {
    unsigned char b[12];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        srv_new_id(ctx, "resp", out, cap);
        out[4] = '_';
        return;
    }
    int n = snprintf(out, cap, "resp_");
    for (size_t i = 0; i < sizeof b && n + 3 <= (int)cap; i++) n += snprintf(out + n, cap - (size_t)n, "%02x", b[i]);
}

enum MHD_Result srv_route_responses(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    srv_error e;
    memset(&e, 0, sizeof e);
    json_t *root = srv_json_parse(sc->body ? sc->body : "", sc->len, SRV_JSON_MAX_DEPTH, &e);
    if (!root) return srv_respond_error(ctx, c, sc, &e);
    srv_parse_limits lim = srv_request_limits(ctx);
    json_t *chat = NULL, *names = NULL, *prev = NULL;
    srv_chat_req r;
    memset(&r, 0, sizeof r);
    const char *prev_id = NULL;
    int keep = 1;
    int rc = json_is_object(root) && srv_get_bool(root, "store", &keep, &e) < 0 ? -1 : 0;
    if (!rc && json_is_object(root)) rc = previous_conversation(ctx, root, &prev_id, &prev, &e);
    if (!rc) rc = srv_responses_to_chat(root, prev, &chat, &names, &e);
    if (!rc) rc = check_metadata(root, &e);
    if (!rc) rc = srv_refuse_ignored(ctx, sc, srv_responses_ignored(root, sc->ignored, sizeof sc->ignored), &e);
    int fetching = rc ? 0 : srv_fetch_media(ctx, c, sc, chat, &lim, &e);
    if (fetching > 0) { /* parked: this runs again once the image URLs are fetched */
        json_decref(prev);
        json_decref(chat);
        json_decref(names);
        json_decref(root);
        return MHD_YES;
    }
    if (fetching) rc = -1;
    if (!rc) rc = srv_chat_parse(chat, &lim, &r, &e);
    srv_fetch_release(ctx, sc);
    if (!rc && ctx->max_context > 0 && r.max_tokens > ctx->max_context)
        rc = srv_bad(&e, "max_tokens", "context_length_exceeded", "max_tokens %d is larger than the model's context of %d tokens",
                     r.max_tokens, ctx->max_context);
    keep = keep && ctx->responses;
    char *base = rc ? NULL : response_base(root, &r, prev_id, keep), *convo = NULL;
    if (!rc && keep) { /* the conversation to keep once answered: the messages less the instructions */
        json_t *msgs = json_deep_copy(json_object_get(chat, "messages"));
        if (json_is_string(json_object_get(root, "instructions"))) json_array_remove(msgs, 0);
        convo = msgs ? json_dumps(msgs, JSON_COMPACT) : NULL;
        json_decref(msgs);
    }
    if (!rc && (!base || (keep && !convo))) rc = srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
    json_decref(prev);
    json_decref(chat);
    json_decref(root);
    srv_conn_free_body(ctx, sc);
    srv_job *j = rc ? NULL : srv_chat_job(ctx, &r, SRV_JOB_RESPONSE, 0, 0, &e);
    srv_chat_req_free(&r);
    if (!j) {
        free(base);
        free(convo);
        srv_responses_rename(names, &e);
        json_decref(names);
        return srv_respond_error(ctx, c, sc, &e);
    }
    json_decref(names);
    j->resp_base = base;
    j->resp_convo = convo;
    random_id(ctx, j->id, sizeof j->id);
    j->created = (long long)time(NULL);
    j->t_arrival = sc->t0;
    return srv_submit_job(ctx, c, sc, j);
}

void srv_response_keep(srv_job *j, const json_t *response) {
    const char *status = json_string_value(json_object_get(response, "status"));
    if (!j->resp_convo || !j->ctx->responses || !status || (strcmp(status, "completed") && strcmp(status, "incomplete"))) return;
    json_t *msgs = json_loads(j->resp_convo, 0, NULL), *said = json_pack("{s:s, s:n}", "role", "assistant", "content"), *calls = json_array();
    size_t i;
    const json_t *it;
    json_array_foreach(json_object_get(response, "output"), i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (type && !strcmp(type, "message")) {
            json_object_set(said, "content", json_object_get(json_array_get(json_object_get(it, "content"), 0), "text"));
            json_object_set(said, "id", json_object_get(it, "id"));
        } else if (type && !strcmp(type, "function_call")) {
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}, s:O}", "id", json_object_get(it, "call_id"), "type",
                                                   "function", "function", "name", json_object_get(it, "name"), "arguments",
                                                   json_object_get(it, "arguments"), "item_id", json_object_get(it, "id")));
        }
    }
    if (json_array_size(calls)) json_object_set(said, "tool_calls", calls);
    else if (json_is_null(json_object_get(said, "content"))) json_object_set_new(said, "content", json_string(""));
    const char *hex = strchr(j->id, '_');
    /* every item named, so that GET .../input_items lists the same ids each time (response_items.h) */
    char *text = msgs && said && !json_array_append(msgs, said) && !srv_items_name(msgs, hex ? hex + 1 : j->id)
                     ? json_dumps(msgs, JSON_COMPACT)
                     : NULL;
    char *whole = text ? json_dumps(response, JSON_COMPACT) : NULL;
    if (text && whole) srv_response_store_put(j->ctx->responses, j->id, j->cache_salt, text, whole);
    else free(text);
    json_decref(msgs);
    json_decref(said);
    json_decref(calls);
    free(j->resp_convo);
    j->resp_convo = NULL; /* kept once */
}

/* The query of GET .../input_items: limit (1-100, default 20), order (asc | desc, the default:
 * newest first), after (an item id: the page starts past it), include. */
typedef struct {
    long limit;
    int asc, image_urls;
    const char *after;
    srv_error *e;
    int failed;
} items_query;

/* include / include[]: each value OpenAI's list takes. Those about items this server never makes
 * (search, computer, code interpreter, reasoning) have nothing to add; the earlier answers'
 * log-probabilities are not kept, so asking for them is a 400 rather than an empty list. */
static enum MHD_Result items_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    items_query *q = cls;
    static const char *const none_here[] = {"file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
                                            "computer_call_output.output.image_url", "code_interpreter_call.outputs",
                                            "reasoning.encrypted_content"};
    if (q->failed || !key) return MHD_YES;
    if (!strcmp(key, "include") || !strcmp(key, "include[]")) {
        const char *v = value ? value : "";
        if (!strcmp(v, "message.input_image.image_url")) {
            q->image_urls = 1;
            return MHD_YES;
        }
        for (size_t i = 0; i < sizeof none_here / sizeof none_here[0]; i++)
            if (!strcmp(v, none_here[i])) return MHD_YES;
        q->failed = 1;
        if (!strcmp(v, "message.output_text.logprobs"))
            srv_bad(q->e, "include", "unsupported_value", "include: the log-probabilities of earlier answers are not kept");
        else srv_bad(q->e, "include", "invalid_value", "include '%.60s' is not one of the Responses API's includables", v);
    } else if (!strcmp(key, "limit")) {
        char *end;
        q->limit = value ? strtol(value, &end, 10) : 0;
        if (!value || *end || q->limit < 1 || q->limit > 100) {
            q->failed = 1;
            srv_bad(q->e, "limit", "invalid_value", "limit must be an integer from 1 to 100 (got '%.20s')", value ? value : "");
        }
    } else if (!strcmp(key, "order")) {
        q->asc = value && !strcmp(value, "asc");
        if (!value || (!q->asc && strcmp(value, "desc"))) {
            q->failed = 1;
            srv_bad(q->e, "order", "invalid_value", "order must be asc or desc (got '%.20s')", value ? value : "");
        }
    } else if (!strcmp(key, "after")) {
        q->after = value;
    } else if (!strcmp(key, "before")) {
        q->failed = 1;
        srv_bad(q->e, "before", "unsupported_parameter", "before is not supported: page with after (and order)");
    }
    return MHD_YES;
}

/* One page of a kept conversation's input items (the conversation less its answer), as OpenAI's
 * list object; -1 with e set. */
static int items_page(const char *convo, const items_query *q, json_t **out, srv_error *e) {
    json_t *msgs = json_loads(convo, 0, NULL);
    if (msgs) json_array_remove(msgs, json_array_size(msgs) - 1); /* the answer: the response's output, not its input */
    json_t *all = msgs ? srv_items_from_messages(msgs, q->image_urls) : NULL, *data = json_array();
    json_decref(msgs);
    if (!all || !data) {
        json_decref(all);
        json_decref(data);
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    size_t n = json_array_size(all), from = 0;
    if (q->after) {
        for (; from < n; from++) {
            const char *at = json_string_value(json_object_get(json_array_get(all, q->asc ? from : n - 1 - from), "id"));
            if (at && !strcmp(at, q->after)) break;
        }
        if (from == n) {
            json_decref(all);
            json_decref(data);
            return srv_bad(e, "after", "invalid_value", "after: no input item '%.64s' in this response", q->after);
        }
        from++;
    }
    for (size_t k = from; k < n && json_array_size(data) < (size_t)q->limit; k++)
        json_array_append(data, json_array_get(all, q->asc ? k : n - 1 - k));
    size_t got = json_array_size(data);
    const json_t *first = json_object_get(json_array_get(data, 0), "id"), *last = json_object_get(json_array_get(data, got - 1), "id");
    *out = json_pack("{s:s, s:o, s:O, s:O, s:b}", "object", "list", "data", data, "first_id", got ? first : json_null(), "last_id",
                     got ? last : json_null(), "has_more", from + got < n);
    json_decref(all);
    return *out ? 0 : srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* GET / DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items. */
enum MHD_Result srv_route_response_stored(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    char id[sizeof sc->path];
    snprintf(id, sizeof id, "%s", sc->path + strlen("/v1/responses/"));
    size_t len = strlen(id), ls = strlen(SRV_ITEMS_SUFFIX);
    int items = sc->route == SRV_R_RESPONSE_ITEMS; /* the path ends in SRV_ITEMS_SUFFIX */
    if (items && len >= ls) id[len - ls] = 0;
    const char *salt = ctx->mhd->lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cache_salt");
    int del = !strcmp(sc->method, "DELETE");
    srv_error e;
    memset(&e, 0, sizeof e);
    if (strchr(id, '/')) {
        srv_fail(&e, 404, "invalid_request_error", NULL, "not_found", "unknown endpoint: %s %s", sc->method, sc->path);
        return srv_respond_error(ctx, c, sc, &e);
    }
    items_query q = {20, 0, 0, NULL, &e, 0};
    if (items) ctx->mhd->get_connection_values(c, MHD_GET_ARGUMENT_KIND, items_arg, &q);
    if (q.failed) return srv_respond_error(ctx, c, sc, &e);
    const char *stream = ctx->mhd->lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "stream");
    if (!items && !del && stream && strcmp(stream, "false")) {
        srv_bad(&e, "stream", "unsupported_value", "a kept response is answered whole: its events are not replayed (stream=%.20s)", stream);
        return srv_respond_error(ctx, c, sc, &e);
    }
    if (!ctx->responses) {
        srv_fail(&e, 404, "invalid_request_error", "response_id", "not_found",
                 "no response found with id '%s': this server keeps none (--response-store off)", id);
        return srv_respond_error(ctx, c, sc, &e);
    }
    char *text = del ? NULL : srv_response_store_get(ctx->responses, id, salt, !items);
    int found = del ? srv_response_store_delete(ctx->responses, id, salt) : text != NULL;
    if (!found) {
        srv_fail(&e, 404, "invalid_request_error", "response_id", "not_found",
                 "no response found with id '%s'%s (kept in memory, the least recently used first to go under --response-store)", id,
                 salt ? " for this cache_salt" : "");
        return srv_respond_error(ctx, c, sc, &e);
    }
    if (del) return srv_respond_json(ctx, c, sc, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1));
    if (!items) return srv_respond(ctx, c, sc, 200, "application/json", text, strlen(text));
    json_t *page = NULL;
    int rc = items_page(text, &q, &page, &e);
    free(text);
    return rc ? srv_respond_error(ctx, c, sc, &e) : srv_respond_json(ctx, c, sc, 200, page);
}

/* ------------------------------------------------------------------ the response object */

void srv_response_item_id(const srv_job *j, const char *prefix, long k, char *out, size_t cap) {
    const char *hex = strchr(j->id, '_');
    if (k < 0) snprintf(out, cap, "%s_%s", prefix, hex ? hex + 1 : j->id);
    else snprintf(out, cap, "%s_%s_%ld", prefix, hex ? hex + 1 : j->id, k);
}

int srv_response_lp_count(const srv_job *j, size_t bytes) {
    size_t chars = 0;
    for (size_t i = 0; i < bytes && j->text; i++) chars += ((unsigned char)j->text[i] & 0xC0) != 0x80;
    int n = 0;
    while (n < j->n_lps && j->lps[n].offset < chars) n++;
    return n;
}

json_t *srv_response_logprobs(const srv_job *j, int from, int to) {
    json_t *o = j->logprobs && to > from ? srv_logprobs_json(j, from, to) : NULL, *a = json_incref(json_object_get(o, "content"));
    json_decref(o);
    return a ? a : json_array();
}

json_t *srv_response_message(const srv_job *j, const char *text, size_t len, const char *status, json_t *logprobs) {
    char id[64];
    srv_response_item_id(j, "msg", -1, id, sizeof id);
    json_t *part = json_pack("{s:s, s:o, s:[], s:o}", "type", "output_text", "text", srv_json_text(text, len), "annotations", "logprobs",
                             logprobs ? logprobs : json_array());
    return json_pack("{s:s, s:s, s:s, s:s, s:[o]}", "type", "message", "id", id, "status", status, "role", "assistant", "content", part);
}

json_t *srv_response_call(const srv_job *j, size_t k, const char *call_id, const char *name, const char *args, size_t args_len,
                          const char *status) {
    char id[64];
    srv_response_item_id(j, "fc", (long)k, id, sizeof id);
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s}", "type", "function_call", "id", id, "call_id", call_id, "name", name, "arguments",
                     srv_json_text(args, args_len), "status", status);
}

/* The answer's items: its text (for a stream, what went out as text) as a message, unless it
 * is all calls; its calls (found, or for a stream cut inside them, what went out of them). */
static json_t *response_output(const srv_job *j) {
    const char *text = j->text ? j->text : "";
    size_t content_len = j->text_len;
    json_t *calls = NULL, *out = json_array();
    if (j->tool_mode != SRV_TOOLS_OFF && j->finish == PM_FINISH_STOP)
        calls = srv_tool_calls_find(text, j->text_len, j->tool_mode, j->tool_at, j->tool_end, j->id, j->index, &content_len);
    const srv_call_reader *rd = &j->calls_read;
    int cut = !calls && rd->n > 0 && rd->calls[0].header_sent; /* a stream cut inside its calls */
    if (j->stream) content_len = j->sent;
    int n_calls = calls ? (int)json_array_size(calls) : 0;
    for (int k = 0; cut && k < rd->n && rd->calls[k].header_sent; k++) n_calls++;
    if (content_len || !n_calls)
        json_array_append_new(out, srv_response_message(j, text, content_len, j->finish == PM_FINISH_LENGTH && !n_calls ? "incomplete" : "completed",
                                                         srv_response_logprobs(j, 0, j->tool_mode != SRV_TOOLS_OFF ? srv_response_lp_count(j, content_len) : j->n_lps)));
    for (size_t k = 0; k < (size_t)n_calls; k++) {
        if (calls) {
            const json_t *c = json_array_get(calls, k), *f = json_object_get(c, "function");
            const json_t *a = json_object_get(f, "arguments");
            json_array_append_new(out, srv_response_call(j, k, json_string_value(json_object_get(c, "id")),
                                                         json_string_value(json_object_get(f, "name")), json_string_value(a),
                                                         json_string_length(a), "completed"));
        } else {
            char cid[96];
            const srv_call_part *p = &rd->calls[k];
            srv_tool_call_id(cid, sizeof cid, j->id, j->index, k);
            json_array_append_new(out, srv_response_call(j, k, cid, p->name, p->args ? p->args : "", p->args_len, "incomplete"));
        }
    }
    json_decref(calls);
    return out;
}

static const char *final_status(const srv_job *j) {
    return j->finish == PM_FINISH_STOP ? "completed" : j->finish == PM_FINISH_LENGTH ? "incomplete" : "failed";
}

json_t *srv_response_object(const srv_job *j, const char *model, int final) {
    json_t *o = json_loads(j->resp_base ? j->resp_base : "{}", 0, NULL), *base = o;
    if (!o) return NULL;
    o = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer(j->created));
    json_object_set_new(o, "model", json_string(model));
    const char *status = final ? final_status(j) : "in_progress";
    json_object_set_new(o, "status", json_string(status));
    json_object_update(o, base); /* the request's fields after the envelope's, in OpenAI's order */
    json_decref(base);
    json_object_set_new(o, "status", json_string(status));
    if (!strcmp(status, "in_progress")) return o;
    if (!strcmp(status, "failed")) {
        srv_error e;
        srv_job_failure(j, &e); /* the request's own fault (its grammar past a limit) keeps its code */
        const char *code = j->finish == PM_FINISH_CANCELLED ? "cancelled" : e.http < 500 ? e.code : "server_error";
        json_object_set_new(o, "error", json_pack("{s:s, s:s}", "code", code, "message",
                                                  j->finish_error[0] ? j->finish_error : "the response was not completed"));
        return o;
    }
    if (!strcmp(status, "incomplete")) json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_set_new(o, "output", response_output(j));
    json_object_set_new(o, "usage", json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", j->prompt_tokens, "input_tokens_details",
                                              "cached_tokens", j->cached_tokens, "output_tokens", j->completion_tokens,
                                              "output_tokens_details", "reasoning_tokens", 0, "total_tokens",
                                              j->prompt_tokens + j->completion_tokens));
    return o;
}

char *srv_response_result(srv_job *j, const char *model, size_t *len) {
    json_t *o = srv_response_object(j, model, 1);
    if (o) srv_response_keep(j, o);
    char *s = o ? srv_json_dump(o, len) : NULL;
    json_decref(o);
    return s;
}
