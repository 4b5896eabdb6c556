/* responses_parse.c — see responses_parse.h. */
#include "responses_parse.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chat_parse.h"

static const char LOGPROBS_INCLUDE[] = "message.output_text.logprobs";

static int rp_oom(srv_error *e) { return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }

static const char *rp_str(const json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

/* names[chat] = body: where a chat field came from. */
static int rp_name(json_t *names, const char *body, srv_error *e, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int rp_name(json_t *names, const char *body, srv_error *e, const char *fmt, ...) {
    char key[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    return json_object_set_new(names, key, json_string(body)) ? rp_oom(e) : 0;
}

/* Parameters that change what a response is and that this server cannot honour. */
static int rp_refuse(const json_t *root, srv_error *e) {
    const json_t *v = json_object_get(root, "conversation");
    if (v && !json_is_null(v))
        return srv_bad(e, "conversation", "unsupported_parameter",
                       "conversation: this server keeps no conversation objects; send previous_response_id or the whole conversation");
    v = json_object_get(root, "background");
    if (json_is_true(v)) return srv_bad(e, "background", "unsupported_parameter", "background responses are not supported by this server");
    if ((v = json_object_get(root, "include")) && !json_is_null(v)) {
        if (!json_is_array(v)) return srv_bad(e, "include", "invalid_type", "include must be an array of strings");
        size_t i;
        const json_t *x;
        json_array_foreach(v, i, x) if (!json_is_string(x) || strcmp(json_string_value(x), LOGPROBS_INCLUDE)) {
            char where[32];
            snprintf(where, sizeof where, "include[%zu]", i);
            return srv_bad(e, where, "unsupported_value", "%s: only \"%s\" can be included by this server", where, LOGPROBS_INCLUDE);
        }
    }
    if ((v = json_object_get(root, "max_tool_calls")) && !json_is_null(v))
        return srv_bad(e, "max_tool_calls", "unsupported_parameter", "max_tool_calls is not supported (parallel_tool_calls false allows one)");
    if ((v = json_object_get(root, "prompt")) && !json_is_null(v))
        return srv_bad(e, "prompt", "unsupported_parameter", "prompt (stored prompt templates) is not supported by this server");
    const char *tr = rp_str(root, "truncation");
    if (tr && strcmp(tr, "disabled"))
        return srv_bad(e, "truncation", "unsupported_value", "truncation '%.32s': only \"disabled\" (a prompt longer than the context is a 400)", tr);
    return 0;
}

/* A content part of input[j] as chat's. */
static json_t *rp_part(const json_t *p, const char *where, srv_error *e) {
    const char *t = json_is_object(p) ? rp_str(p, "type") : NULL;
    if (!t) {
        srv_bad(e, where, "invalid_type", "%s must be an object with a string type", where);
        return NULL;
    }
    json_t *c = NULL;
    if (!strcmp(t, "input_text") || !strcmp(t, "output_text") || !strcmp(t, "text")) {
        c = json_pack("{s:s, s:O}", "type", "text", "text", json_object_get(p, "text") ? json_object_get(p, "text") : json_null());
    } else if (!strcmp(t, "input_image")) {
        const json_t *u = json_object_get(p, "image_url");
        if (!u && json_object_get(p, "file_id")) {
            srv_bad(e, where, "unsupported_value", "%s: file_id images are not supported (send image_url: data:image/...;base64,...)", where);
            return NULL;
        }
        c = json_pack("{s:s, s:O}", "type", "image_url", "image_url", u ? u : json_null());
    } else if (!strcmp(t, "input_audio")) {
        c = json_deep_copy(p);
    } else {
        srv_bad(e, where, "unknown_content_part", "%s type '%.40s' is not supported (input_text, input_image, input_audio, output_text)",
                where, t);
        return NULL;
    }
    if (!c) rp_oom(e);
    return c;
}

/* A message item {role, content} as a chat message (messages[i]). */
static json_t *rp_message(const json_t *it, size_t j, size_t i, json_t *names, srv_error *e) {
    char where[96];
    const json_t *c = json_object_get(it, "content");
    const char *role = rp_str(it, "role");
    snprintf(where, sizeof where, "input[%zu].role", j);
    if (!role) {
        srv_bad(e, where, "missing_required_parameter", "%s is required (user, system, developer or assistant)", where);
        return NULL;
    }
    snprintf(where, sizeof where, "input[%zu]", j);
    if (rp_name(names, where, e, "messages[%zu]", i)) return NULL;
    json_t *m = json_pack("{s:s}", "role", role);
    if (!m || (json_is_string(json_object_get(it, "id")) && json_object_set(m, "id", json_object_get(it, "id")))) {
        json_decref(m);
        rp_oom(e);
        return NULL;
    }
    if (!json_is_array(c)) {
        json_object_set(m, "content", c ? (json_t *)c : json_null());
        return m;
    }
    json_t *parts = json_array();
    json_object_set_new(m, "content", parts);
    size_t k;
    const json_t *p;
    json_array_foreach(c, k, p) {
        snprintf(where, sizeof where, "input[%zu].content[%zu]", j, k);
        json_t *cp = rp_part(p, where, e);
        if (!cp || json_array_append_new(parts, cp)) {
            json_decref(m);
            if (cp) rp_oom(e);
            return NULL;
        }
    }
    return m;
}

/* input (and instructions, and the previous conversation) as chat's messages. */
static int rp_messages(const json_t *root, const json_t *previous, json_t *msgs, json_t *names, srv_error *e) {
    const json_t *ins = json_object_get(root, "instructions"), *in = json_object_get(root, "input");
    if (ins && !json_is_null(ins)) {
        if (!json_is_string(ins)) return srv_bad(e, "instructions", "invalid_type", "instructions must be a string");
        if (json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins))) return rp_oom(e);
        if (rp_name(names, "instructions", e, "messages[0]")) return -1;
    }
    size_t p;
    const json_t *pm;
    json_array_foreach(previous, p, pm) { /* the stored conversation, its instructions not carried over */
        if (json_array_append_new(msgs, json_deep_copy(pm)) || rp_name(names, "previous_response_id", e, "messages[%zu]", json_array_size(msgs) - 1))
            return rp_oom(e);
    }
    if (!in || json_is_null(in)) return srv_bad(e, "input", "missing_required_parameter", "input is required");
    if (json_is_string(in)) {
        if (json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", in))) return rp_oom(e);
        if (rp_name(names, "input", e, "messages[%zu].content", json_array_size(msgs) - 1)) return -1;
        return rp_name(names, "input", e, "messages[%zu]", json_array_size(msgs) - 1);
    }
    if (!json_is_array(in)) return srv_bad(e, "input", "invalid_type", "input must be a string or an array of input items");
    size_t j;
    const json_t *it;
    json_t *calls = NULL; /* the tool_calls of the assistant message a run of function_call items joins */
    json_array_foreach(in, j, it) {
        char where[96];
        snprintf(where, sizeof where, "input[%zu]", j);
        if (!json_is_object(it)) return srv_bad(e, where, "invalid_type", "%s must be an object", where);
        const char *type = rp_str(it, "type");
        size_t i = json_array_size(msgs);
        if (!type || !strcmp(type, "message")) {
            json_t *m = rp_message(it, j, i, names, e);
            if (!m) return -1;
            if (json_array_append_new(msgs, m)) return rp_oom(e);
            calls = NULL;
            if (!strcmp(rp_str(m, "role"), "assistant")) { /* function_call items right after it join it */
                if (!json_is_array(json_object_get(m, "content")) && !json_is_string(json_object_get(m, "content")))
                    json_object_set_new(m, "content", json_null());
                calls = json_array();
                if (!calls || json_object_set_new(m, "tool_calls", calls)) return rp_oom(e);
            }
        } else if (!strcmp(type, "function_call")) {
            if (!calls) { /* an assistant message of its own */
                json_t *m = json_pack("{s:s, s:n, s:[]}", "role", "assistant", "content", "tool_calls");
                if (!m || json_array_append_new(msgs, m)) return rp_oom(e);
                calls = json_object_get(m, "tool_calls");
                if (rp_name(names, where, e, "messages[%zu]", i)) return -1;
            }
            size_t i_msg = json_array_size(msgs) - 1, m_call = json_array_size(calls);
            const json_t *id = json_object_get(it, "call_id"), *nm = json_object_get(it, "name"), *args = json_object_get(it, "arguments");
            json_t *call = json_pack("{s:o, s:s, s:{s:O, s:O}}", "id", id ? json_incref((json_t *)id) : json_string("call"), "type",
                                     "function", "function", "name", nm ? nm : json_null(), "arguments", args ? args : json_null());
            if (call && json_is_string(json_object_get(it, "id")) && json_object_set(call, "item_id", json_object_get(it, "id"))) {
                json_decref(call);
                call = NULL;
            }
            if (!call || json_array_append_new(calls, call)) return rp_oom(e);
            if (rp_name(names, where, e, "messages[%zu].tool_calls[%zu].function", i_msg, m_call) ||
                rp_name(names, where, e, "messages[%zu].tool_calls[%zu]", i_msg, m_call))
                return -1;
        } else if (!strcmp(type, "function_call_output")) {
            const json_t *out = json_object_get(it, "output"), *id = json_object_get(it, "call_id");
            json_t *content = NULL;
            if (json_is_array(out)) { /* parts: text only in a tool message */
                content = json_array();
                size_t k;
                const json_t *p;
                json_array_foreach(out, k, p) {
                    char pw[112];
                    snprintf(pw, sizeof pw, "input[%zu].output[%zu]", j, k);
                    json_t *cp = rp_part(p, pw, e);
                    if (!cp) {
                        json_decref(content);
                        return -1;
                    }
                    json_array_append_new(content, cp);
                }
            }
            json_t *m = json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id ? id : json_null(), "content",
                                  content ? content : json_incref((json_t *)(out ? out : json_null())));
            if (m && json_is_string(json_object_get(it, "id")) && json_object_set(m, "id", json_object_get(it, "id"))) {
                json_decref(m);
                m = NULL;
            }
            if (!m || json_array_append_new(msgs, m)) return rp_oom(e);
            char ow[112];
            snprintf(ow, sizeof ow, "input[%zu].output", j);
            if (rp_name(names, where, e, "messages[%zu]", i) || rp_name(names, ow, e, "messages[%zu].content", i)) return -1;
            calls = NULL;
        } else {
            char tp[112];
            snprintf(tp, sizeof tp, "input[%zu].type", j);
            return srv_bad(e, tp, "unsupported_value",
                           "%s '%.40s' is not supported (message, function_call, function_call_output; nothing is stored to refer to)", tp,
                           type);
        }
    }
    /* an assistant message whose run of calls stayed empty carries none */
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *tc = json_object_get(m, "tool_calls");
        if (json_is_array(tc) && !json_array_size(tc)) {
            json_object_del(m, "tool_calls");
            if (json_is_null(json_object_get(m, "content"))) json_object_set_new(m, "content", json_string(""));
        }
    }
    return 0;
}

/* Function tools {type, name, description, parameters, strict} as chat's {type, function: {...}}. */
static int rp_tools(const json_t *root, json_t *chat, srv_error *e) {
    const json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice");
    if (json_is_array(tools)) {
        json_t *out = json_array();
        if (!out || json_object_set_new(chat, "tools", out)) return rp_oom(e);
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t) {
            char where[48];
            snprintf(where, sizeof where, "tools[%zu].type", i);
            const char *ty = json_is_object(t) ? rp_str(t, "type") : NULL;
            if (!ty || strcmp(ty, "function"))
                return srv_bad(e, where, "unsupported_value", "%s '%.40s': only function tools are supported by this server", where,
                               ty ? ty : "(none)");
            json_t *fn = json_deep_copy(t);
            if (!fn) return rp_oom(e);
            json_object_del(fn, "type");
            json_object_del(fn, "strict");
            if (json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn))) return rp_oom(e);
        }
    } else if (tools && !json_is_null(tools)) {
        json_object_set(chat, "tools", (json_t *)tools); /* the chat parser names the mistake */
    }
    if (json_is_object(tc)) {
        const char *ty = rp_str(tc, "type");
        if (!ty || strcmp(ty, "function"))
            return srv_bad(e, "tool_choice", "unsupported_value", "tool_choice type '%.40s': only none, auto, required or a function",
                           ty ? ty : "(none)");
        const json_t *nm = json_object_get(tc, "name");
        if (json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", nm ? nm : json_null())))
            return rp_oom(e);
    } else if (tc) {
        json_object_set(chat, "tool_choice", (json_t *)tc);
    }
    return 0;
}

/* text.format as chat's response_format. */
static int rp_format(const json_t *root, json_t *chat, srv_error *e) {
    const json_t *text = json_object_get(root, "text");
    if (!text || json_is_null(text)) return 0;
    if (!json_is_object(text)) return srv_bad(e, "text", "invalid_type", "text must be an object ({\"format\": {...}})");
    const json_t *f = json_object_get(text, "format");
    if (!f || json_is_null(f)) return 0;
    const char *ty = json_is_object(f) ? rp_str(f, "type") : NULL;
    if (!ty) return srv_bad(e, "text.format", "invalid_type", "text.format must be an object with a string type");
    json_t *rf;
    if (!strcmp(ty, "json_schema")) {
        json_t *js = json_deep_copy(f);
        if (!js) return rp_oom(e);
        json_object_del(js, "type");
        rf = json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js);
    } else {
        rf = json_pack("{s:s}", "type", ty);
    }
    return !rf || json_object_set_new(chat, "response_format", rf) ? rp_oom(e) : 0;
}

/* Fields handed to the chat body as they are. */
static const char *const passed_to_chat[] = {"model", "temperature", "top_p", "min_p", "stream", "parallel_tool_calls", "seed", "top_k",
                                           "stop", "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias",
                                           "min_tokens", "ignore_eos", "cache_salt", "mm_processor_kwargs", NULL};
/* The others this file, routes_responses.c and the store read (or refuse by name). */
static const char *const responses_own[] = {"input", "instructions", "include", "top_logprobs", "max_output_tokens", "tools",
                                            "tool_choice", "text", "conversation", "background", "max_tool_calls", "prompt",
                                            "truncation", "store", "previous_response_id", "metadata", "user", NULL};

int srv_responses_ignored(const json_t *root, char *out, size_t cap) {
    const char *const *const lists[] = {passed_to_chat, responses_own, NULL};
    return srv_unread_fields(root, lists, out, cap);
}

int srv_responses_to_chat(const json_t *root, const json_t *previous, json_t **chat, json_t **names, srv_error *e) {
    *chat = *names = NULL;
    if (!json_is_object(root)) return srv_bad(e, NULL, "invalid_json", "the request body must be a JSON object");
    if (rp_refuse(root, e)) return -1;
    json_t *c = json_object(), *nm = json_object(), *msgs = json_array();
    int rc = c && nm && msgs && !json_object_set(c, "messages", msgs) ? 0 : rp_oom(e);
    for (size_t i = 0; !rc && passed_to_chat[i]; i++) {
        json_t *v = json_object_get(root, passed_to_chat[i]);
        if (v && json_object_set(c, passed_to_chat[i], v)) rc = rp_oom(e);
    }
    /* log-probabilities: asked by include or top_logprobs (alternatives each), as chat's */
    const json_t *inc = json_object_get(root, "include"), *tl = json_object_get(root, "top_logprobs");
    int want = json_array_size(inc) || (json_is_integer(tl) && json_integer_value(tl) > 0);
    if (!rc && want && json_object_set_new(c, "logprobs", json_true())) rc = rp_oom(e);
    if (!rc && tl && !json_is_null(tl) && json_object_set(c, "top_logprobs", (json_t *)tl)) rc = rp_oom(e);
    const json_t *mt = json_object_get(root, "max_output_tokens");
    if (!rc && mt && !json_is_null(mt) && json_object_set(c, "max_tokens", (json_t *)mt)) rc = rp_oom(e);
    if (!rc) rc = rp_messages(root, previous, msgs, nm, e);
    if (!rc) rc = rp_tools(root, c, e);
    if (!rc) rc = rp_format(root, c, e);
    json_decref(msgs);
    if (rc) {
        json_decref(c);
        json_decref(nm);
        return -1;
    }
    *chat = c;
    *names = nm;
    return 0;
}

/* ------------------------------------------------------------------ error names */

static int rp_ident(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* The end of the path segment at s ("[k]" or ".name"), or NULL. */
static const char *rp_segment_end(const char *s) {
    if (*s == '[') {
        const char *p = s + 1;
        while (isdigit((unsigned char)*p)) p++;
        return p > s + 1 && *p == ']' ? p + 1 : NULL;
    }
    if (*s == '.' && rp_ident(s[1])) {
        const char *p = s + 1;
        while (rp_ident(*p)) p++;
        return p;
    }
    return NULL;
}

static void rp_put(char *out, size_t cap, size_t *o, const char *s, size_t n) {
    for (size_t i = 0; i < n && *o + 1 < cap; i++) out[(*o)++] = s[i];
    out[*o] = 0;
}

/* in with chat's field names replaced by the body's, into out. */
static void rp_rename(const json_t *names, const char *in, char *out, size_t cap) {
    static const char *const fixed[][2] = {{"response_format.json_schema.", "text.format."},
                                           {"response_format.json_schema", "text.format"},
                                           {"response_format", "text.format"},
                                           {"max_tokens", "max_output_tokens"},
                                           {"tool_choice.function.name", "tool_choice.name"}};
    size_t o = 0;
    out[0] = 0;
    for (const char *s = in; *s;) {
        int boundary = s == in || !rp_ident(s[-1]);
        if (boundary && !strncmp(s, "messages", 8)) { /* the longest path from here that the map names */
            const char *ends[8];
            int n = 0;
            for (const char *p = s + 8; n < 8 && (p = rp_segment_end(p));) ends[n++] = p;
            const char *to = NULL, *end = s + 8;
            char key[160];
            for (int k = n - 1; k >= 0 && !to; k--) {
                snprintf(key, sizeof key, "%.*s", (int)(ends[k] - s), s);
                if ((to = rp_str(names, key))) end = ends[k];
            }
            if (!to && !rp_segment_end(s + 8)) to = "input"; /* the conversation as a whole */
            if (to) {
                rp_put(out, cap, &o, to, strlen(to));
                s = end;
                continue;
            }
        }
        if (boundary && !strncmp(s, "tools[", 6)) { /* tools[i].function.x -> tools[i].x */
            const char *p = rp_segment_end(s + 5);
            if (p && !strncmp(p, ".function", 9) && !rp_ident(p[9])) {
                rp_put(out, cap, &o, s, (size_t)(p - s));
                s = p + 9;
                continue;
            }
        }
        size_t f = 0, nf = sizeof fixed / sizeof fixed[0];
        while (f < nf && !(boundary && !strncmp(s, fixed[f][0], strlen(fixed[f][0])))) f++;
        if (f < nf) {
            rp_put(out, cap, &o, fixed[f][1], strlen(fixed[f][1]));
            s += strlen(fixed[f][0]);
            continue;
        }
        rp_put(out, cap, &o, s, 1);
        s++;
    }
}

void srv_responses_rename(const json_t *names, srv_error *e) {
    char buf[sizeof e->msg];
    rp_rename(names, e->param, buf, sizeof e->param);
    memcpy(e->param, buf, sizeof e->param);
    rp_rename(names, e->msg, buf, sizeof buf);
    memcpy(e->msg, buf, sizeof e->msg);
}
