/* response_items.c — see response_items.h. */
#include "response_items.h"

#include <stdio.h>
#include <string.h>

static const char *str_of(const json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

static int set_id(json_t *o, const char *key, const char *fmt, const char *hex, size_t i, long k) {
    if (json_is_string(json_object_get(o, key))) return 0;
    char id[96];
    if (k < 0) snprintf(id, sizeof id, fmt, hex, i);
    else snprintf(id, sizeof id, fmt, hex, i, k);
    return json_object_set_new(o, key, json_string(id)) ? -1 : 0;
}

int srv_items_name(json_t *msgs, const char *hex) {
    size_t i, k;
    json_t *m, *call;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) continue;
        const char *role = str_of(m, "role");
        int tool = role && !strcmp(role, "tool");
        if (set_id(m, "id", tool ? "fco_%s_%zu" : "msg_%s_%zu", hex, i, -1)) return -1;
        json_array_foreach(json_object_get(m, "tool_calls"), k, call)
            if (json_is_object(call) && set_id(call, "item_id", "fc_%s_%zu_%ld", hex, i, (long)k)) return -1;
    }
    return 0;
}

/* A text as the Responses part (output: an assistant's). */
static json_t *text_part(const json_t *t, int output) {
    if (output) return json_pack("{s:s, s:O, s:[]}", "type", "output_text", "text", t ? t : json_null(), "annotations");
    return json_pack("{s:s, s:O}", "type", "input_text", "text", t ? t : json_null());
}

/* A chat content part as the Responses part. */
static json_t *item_part(const json_t *p, int output, int image_urls) {
    const char *type = str_of(p, "type");
    if (!type || !strcmp(type, "text")) return text_part(json_object_get(p, "text"), output);
    if (!strcmp(type, "image_url")) {
        const json_t *u = json_object_get(p, "image_url"), *detail = json_object_get(u, "detail");
        if (json_is_object(u)) u = json_object_get(u, "url");
        const char *d = json_string_value(detail);
        return json_pack("{s:s, s:O, s:s}", "type", "input_image", "image_url", image_urls && u ? u : json_null(), "detail", d ? d : "auto");
    }
    return json_deep_copy(p); /* input_audio, as it was sent */
}

/* content (a string, null or parts) as an array of parts; NULL on OOM. */
static json_t *item_content(const json_t *content, int output, int image_urls) {
    json_t *parts = json_array();
    if (!parts) return NULL;
    if (json_is_string(content)) {
        json_t *q = text_part(content, output);
        if (!q || json_array_append_new(parts, q)) goto oom;
        return parts;
    }
    size_t k;
    const json_t *p;
    json_array_foreach(content, k, p) {
        json_t *q = item_part(p, output, image_urls);
        if (!q || json_array_append_new(parts, q)) goto oom;
    }
    return parts;
oom:
    json_decref(parts);
    return NULL;
}

/* Whether an assistant message says anything besides its calls. */
static int has_text(const json_t *content) {
    if (json_is_string(content)) return json_string_length(content) > 0;
    return json_is_array(content) && json_array_size(content) > 0;
}

static int append_message(json_t *items, const json_t *m, const char *role, int image_urls) {
    int assistant = !strcmp(role, "assistant");
    json_t *parts = item_content(json_object_get(m, "content"), assistant, image_urls);
    json_t *it = parts ? json_pack("{s:O, s:s, s:s, s:s, s:o}", "id", json_object_get(m, "id") ? json_object_get(m, "id") : json_null(),
                                   "type", "message", "role", role, "status", "completed", "content", parts)
                       : NULL;
    return it && !json_array_append_new(items, it) ? 0 : -1;
}

static int append_calls(json_t *items, const json_t *calls) {
    size_t k;
    const json_t *c;
    json_array_foreach(calls, k, c) {
        const json_t *f = json_object_get(c, "function"), *id = json_object_get(c, "item_id"), *call_id = json_object_get(c, "id");
        const json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        json_t *it = json_pack("{s:O, s:s, s:O, s:O, s:o, s:s}", "id", id ? id : json_null(), "type", "function_call", "call_id",
                               call_id ? call_id : json_null(), "name", name ? name : json_null(), "arguments",
                               args ? json_incref((json_t *)args) : json_string(""), "status", "completed");
        if (!it || json_array_append_new(items, it)) return -1;
    }
    return 0;
}

static int append_output(json_t *items, const json_t *m) {
    const json_t *content = json_object_get(m, "content"), *id = json_object_get(m, "id"), *call_id = json_object_get(m, "tool_call_id");
    json_t *out = json_is_array(content) ? item_content(content, 0, 0) : json_incref((json_t *)(content ? content : json_null()));
    json_t *it = out ? json_pack("{s:O, s:s, s:O, s:o, s:s}", "id", id ? id : json_null(), "type", "function_call_output", "call_id",
                                 call_id ? call_id : json_null(), "output", out, "status", "completed")
                     : NULL;
    return it && !json_array_append_new(items, it) ? 0 : -1;
}

json_t *srv_items_from_messages(const json_t *msgs, int image_urls) {
    json_t *items = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = str_of(m, "role");
        if (!items || !role) continue;
        const json_t *calls = json_object_get(m, "tool_calls");
        int rc;
        if (!strcmp(role, "tool")) rc = append_output(items, m);
        else if (!strcmp(role, "assistant") && json_array_size(calls))
            rc = (has_text(json_object_get(m, "content")) ? append_message(items, m, role, 0) : 0) || append_calls(items, calls) ? -1 : 0;
        else rc = append_message(items, m, role, image_urls);
        if (rc) {
            json_decref(items);
            items = NULL;
        }
    }
    return items;
}
