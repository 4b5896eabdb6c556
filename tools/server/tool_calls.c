/* tool_calls.c — see tool_calls.h. */
#include "tool_calls.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_schema.h"
#include "json_util.h"

static const char CALL_OPEN[] = "<|tool_call|>", CALL_CLOSE[] = "<|/tool_call|>", FUNCTOOLS[] = "functools";

/* As Python's json.dumps writes it by default (the model card's tool lists): ", " and ": " between
 * items, non-ASCII escaped as \uXXXX. (Floats differ: jansson writes 17 significant digits where
 * Python writes the shortest repr.) */
static char *dump_spaced(const json_t *v) {
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
    for (char *p = s; p && *p; p++) /* jansson's \u00E9 is Python's \u00e9 */
        if (*p == '\\' && p[1] == 'u') {
            int k = 2;
            for (; k < 6 && p[k]; k++) p[k] = (char)tolower((unsigned char)p[k]);
            p += k - 1;
        } else if (*p == '\\' && p[1]) {
            p++;
        }
    return s;
}

static int oom(srv_error *e) { return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory"); }

/* OpenAI's rule for function names: 1-64 of [A-Za-z0-9_-]. */
static int name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > SRV_MAX_TOOL_NAME) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return 0;
    return 1;
}

/* tool_choice: none, auto, required, or {"type": "function", "function": {"name": N}} (*want = N). */
static int parse_choice(const json_t *c, int *none, int *forced, const char **want, srv_error *e) {
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) {
        const char *s = json_string_value(c);
        if (!strcmp(s, "none")) *none = 1;
        else if (!strcmp(s, "required")) *forced = 1;
        else if (strcmp(s, "auto"))
            return srv_bad(e, "tool_choice", "invalid_value", "tool_choice '%.40s' is not one of none, auto, required or a function", s);
        return 0;
    }
    const json_t *t = json_is_object(c) ? json_object_get(c, "type") : NULL, *f = json_is_object(c) ? json_object_get(c, "function") : NULL;
    if (!json_is_string(t) || strcmp(json_string_value(t), "function") || !json_is_object(f))
        return srv_bad(e, "tool_choice", "invalid_type", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    const json_t *n = json_object_get(f, "name");
    if (!json_is_string(n)) return srv_bad(e, "tool_choice.function.name", "invalid_type", "tool_choice.function.name must be a string");
    *want = json_string_value(n);
    *forced = 1;
    return 0;
}

/* tools[i] as the prompt's function object {"name", "description", "parameters"}; *name its name. */
static int parse_tool(const json_t *t, size_t i, json_t *list, const char **name, srv_error *e) {
    char param[64];
    snprintf(param, sizeof param, "tools[%zu]", i);
    const json_t *ty = json_is_object(t) ? json_object_get(t, "type") : NULL, *f = json_is_object(t) ? json_object_get(t, "function") : NULL;
    if (!json_is_object(t)) return srv_bad(e, param, "invalid_type", "%s must be an object {\"type\": \"function\", \"function\": {...}}", param);
    if (!json_is_string(ty) || strcmp(json_string_value(ty), "function"))
        return srv_bad(e, param, "invalid_value", "%s: only tools of type \"function\" are supported", param);
    snprintf(param, sizeof param, "tools[%zu].function", i);
    if (!json_is_object(f)) return srv_bad(e, param, "invalid_type", "%s must be an object", param);
    const json_t *n = json_object_get(f, "name"), *d = json_object_get(f, "description"), *p = json_object_get(f, "parameters");
    snprintf(param, sizeof param, "tools[%zu].function.name", i);
    if (!json_is_string(n) || !name_ok(json_string_value(n)))
        return srv_bad(e, param, "invalid_value", "%s must be 1-64 letters, digits, '_' or '-'", param);
    *name = json_string_value(n);
    if (d && !json_is_null(d) && !json_is_string(d)) {
        snprintf(param, sizeof param, "tools[%zu].function.description", i);
        return srv_bad(e, param, "invalid_type", "%s must be a string", param);
    }
    if (p && !json_is_null(p) && !json_is_object(p)) {
        snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
        return srv_bad(e, param, "invalid_type", "%s must be a JSON Schema object", param);
    }
    json_t *o = json_object();
    if (!o || json_array_append_new(list, o)) return oom(e);
    json_object_set(o, "name", (json_t *)n);
    if (json_is_string(d)) json_object_set(o, "description", (json_t *)d);
    if (json_is_object(p)) json_object_set(o, "parameters", (json_t *)p);
    return 0;
}

/* Whether v holds a "$ref" into its document elsewhere than its $defs / definitions (such as "#"
 * itself): moved under a call's "arguments" it would point somewhere else. */
static int refs_elsewhere(const json_t *v) {
    const char *k;
    size_t i;
    json_t *x;
    if (json_is_object(v)) {
        json_t *r = json_object_get(v, "$ref");
        if (json_is_string(r)) {
            const char *t = json_string_value(r);
            if (t[0] == '#' && strncmp(t, "#/$defs/", 8) && strncmp(t, "#/definitions/", 14)) return 1;
        }
        json_object_foreach((json_t *)v, k, x) if (refs_elsewhere(x)) return 1;
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x) if (refs_elsewhere(x)) return 1;
    }
    return 0;
}

/* One call of function fn: {"name": its name, "arguments": its parameters}, the parameters' $defs
 * (or definitions) moved to root, where their "#/$defs/..." references point; when another
 * function's already sit there under a name of these, or a reference points elsewhere in the
 * parameters, its arguments are any object instead. */
static json_t *call_schema(const json_t *fn, json_t *root) {
    const json_t *p = json_object_get(fn, "parameters");
    json_t *args;
    if (p) {
        args = json_deep_copy(p);
        const char *defs[] = {"$defs", "definitions"};
        int clash = refs_elsewhere(args);
        for (int k = 0; k < 2; k++) {
            const char *name;
            json_t *d = json_object_get(args, defs[k]), *v, *have = json_object_get(root, defs[k]);
            json_object_foreach(json_is_object(d) && json_is_object(have) ? d : NULL, name, v) clash |= json_object_get(have, name) != NULL;
        }
        for (int k = 0; k < 2 && !clash; k++) {
            json_t *d = json_object_get(args, defs[k]);
            if (!d) continue;
            if (!json_object_get(root, defs[k])) json_object_set_new(root, defs[k], json_object());
            if (json_is_object(d)) json_object_update(json_object_get(root, defs[k]), d);
            json_object_del(args, defs[k]);
        }
        if (clash) {
            json_decref(args);
            args = json_pack("{s:s}", "type", "object");
        }
    } else {
        args = json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 0); /* no parameters: {} */
    }
    return json_pack("{s:s, s:{s:{s:O}, s:o}, s:[s, s]}", "type", "object", "properties", "name", "const", json_object_get(fn, "name"),
                     "arguments", args, "required", "name", "arguments");
}

/* The schema a forced answer is held to: a list of calls of the functions list[which] (-1: any of
 * them, told apart by their names), one call only with one_call. */
static json_t *calls_schema(const json_t *list, int which, int one_call) {
    json_t *root = json_object(), *items;
    if (which >= 0) {
        items = call_schema(json_array_get(list, (size_t)which), root);
    } else {
        items = json_pack("{s:[]}", "anyOf");
        size_t i;
        json_t *fn;
        json_array_foreach(list, i, fn) json_array_append_new(json_object_get(items, "anyOf"), call_schema(fn, root));
    }
    json_object_set_new(root, "type", json_string("array"));
    json_object_set_new(root, "items", items);
    json_object_set_new(root, "minItems", json_integer(1));
    if (one_call) json_object_set_new(root, "maxItems", json_integer(1));
    return root;
}

/* What follows the model's own <|tool_call|> with tool_choice auto: a list of calls as above, or
 * one call alone (how the model writes them is undocumented; the reader takes both): the list's
 * '[' or the call's '{' picks the branch, and the calls' names tell the objects apart. */
static json_t *lazy_schema(const json_t *list, int one_call) {
    json_t *root = calls_schema(list, -1, one_call), *any = json_array(), *items = json_object_get(root, "items");
    json_t *array = json_pack("{s:s, s:O, s:O}", "type", "array", "items", items, "minItems", json_object_get(root, "minItems"));
    if (one_call) json_object_set(array, "maxItems", json_object_get(root, "maxItems"));
    json_array_append_new(any, array);
    json_t *calls = json_object_get(items, "anyOf");
    if (calls) json_array_extend(any, calls);
    else json_array_append(any, items);
    json_object_del(root, "type");
    json_object_del(root, "items");
    json_object_del(root, "minItems");
    json_object_del(root, "maxItems");
    json_object_set_new(root, "anyOf", any); /* beside the functions' $defs, if any */
    return root;
}

/* Compiles schema text; a refusal is a 400 on param. */
static int check_schema(const char *text, const char *param, srv_error *e) {
    pm_json_schema *s = NULL;
    pm_err pe = {0};
    int rc = pm_json_schema_compile(text, &s, &pe);
    pm_json_schema_free(s);
    if (rc == PM_ENOMEM) return oom(e);
    if (rc) return srv_bad(e, param, rc == PM_EUNSUPPORTED ? "unsupported_value" : "invalid_value", "%s: %s", param, pe.msg);
    return 0;
}

static int forced_schema(const json_t *list, int which, int one_call, char **schema, srv_error *e) {
    size_t i;
    json_t *fn;
    json_array_foreach(list, i, fn) { /* each callable function's mistakes named on its own path first */
        if ((which >= 0 && (size_t)which != i) || !json_object_get(fn, "parameters")) continue;
        char param[64], *t = json_dumps(json_object_get(fn, "parameters"), JSON_COMPACT);
        snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
        int rc = t ? check_schema(t, param, e) : oom(e);
        free(t);
        if (rc) return rc;
    }
    json_t *s = calls_schema(list, which, one_call);
    *schema = s ? json_dumps(s, JSON_COMPACT) : NULL;
    json_decref(s);
    if (!*schema) return oom(e);
    return check_schema(*schema, "tools", e);
}

int srv_tools_parse(const json_t *root, srv_tool_mode *mode, char **tools_text, char **schema, srv_error *e) {
    *mode = SRV_TOOLS_OFF;
    *tools_text = *schema = NULL;
    const json_t *tools = json_object_get(root, "tools");
    int parallel = 1, none = 0, forced = 0;
    const char *want = NULL;
    if (srv_get_bool(root, "parallel_tool_calls", &parallel, e) < 0) return -1;
    if (parse_choice(json_object_get(root, "tool_choice"), &none, &forced, &want, e)) return -1;
    size_t n = 0;
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return srv_bad(e, "tools", "invalid_type", "tools must be an array of {\"type\": \"function\", \"function\": {...}}");
        n = json_array_size(tools);
        if (n > SRV_MAX_TOOLS) return srv_bad(e, "tools", "invalid_value", "at most %d tools are accepted (got %zu)", SRV_MAX_TOOLS, n);
    }
    if (forced && !n) return srv_bad(e, "tool_choice", "invalid_value", "tool_choice %s needs tools", want ? "with a function" : "'required'");
    if (!n || none) return 0;
    json_t *list = json_array(), *names = json_array(); /* names: to find a duplicate */
    int rc = list && names ? 0 : oom(e), which = -1;
    for (size_t i = 0; i < n && !rc; i++) {
        const char *name = NULL;
        if ((rc = parse_tool(json_array_get(tools, i), i, list, &name, e))) break;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(json_string_value(json_array_get(names, k)), name)) {
                char param[64];
                snprintf(param, sizeof param, "tools[%zu].function.name", i);
                rc = srv_bad(e, param, "invalid_value", "%s: '%s' is also the name of tools[%zu]", param, name, k);
            }
        if (!rc && json_array_append_new(names, json_string(name))) rc = oom(e);
        if (want && !strcmp(want, name)) which = (int)i;
    }
    if (!rc && want && which < 0)
        rc = srv_bad(e, "tool_choice.function.name", "invalid_value", "tool_choice names '%.64s', which is none of the tools", want);
    if (!rc && forced && !want && n == 1) which = 0;
    if (!rc && forced) rc = forced_schema(list, which, want || !parallel, schema, e);
    if (!rc && !forced) { /* auto: held from the model's <|tool_call|> on, when every function's parameters compile */
        json_t *s = lazy_schema(list, !parallel);
        *schema = s ? json_dumps(s, JSON_COMPACT) : NULL;
        json_decref(s);
        pm_json_schema *c = NULL;
        pm_err pe = {0};
        int crc = *schema ? pm_json_schema_compile(*schema, &c, &pe) : PM_ENOMEM;
        if (crc == PM_ENOMEM) rc = oom(e);
        else if (crc) { /* a keyword the mask cannot hold: the calls are read as the model writes them */
            free(*schema);
            *schema = NULL;
        }
        pm_json_schema_free(c);
    }
    if (!rc && !(*tools_text = dump_spaced(list))) rc = oom(e);
    if (!rc) *mode = forced ? SRV_TOOLS_FORCED : SRV_TOOLS_AUTO;
    json_decref(list);
    json_decref(names);
    return rc;
}

int srv_tool_calls_render(const json_t *calls, const char *param, char **out, srv_error *e) {
    *out = NULL;
    char where[128];
    if (!json_is_array(calls) || !json_array_size(calls)) return srv_bad(e, param, "invalid_type", "%s must be a non-empty array of tool calls", param);
    json_t *list = json_array();
    if (!list) return oom(e);
    size_t i;
    const json_t *c;
    json_array_foreach(calls, i, c) {
        const json_t *f = json_is_object(c) ? json_object_get(c, "function") : NULL;
        const json_t *n = json_is_object(f) ? json_object_get(f, "name") : NULL, *a = json_is_object(f) ? json_object_get(f, "arguments") : NULL;
        snprintf(where, sizeof where, "%s[%zu].function", param, i);
        if (!json_is_string(n) || (a && !json_is_string(a))) {
            json_decref(list);
            return srv_bad(e, where, "invalid_type", "%s must be {\"name\": string, \"arguments\": JSON text}", where);
        }
        /* the arguments as the JSON they spell; text that is not JSON stays a string */
        json_t *args = a ? json_loads(json_string_value(a), JSON_DECODE_ANY, NULL) : json_object();
        if (!args) args = json_copy((json_t *)a);
        json_array_append_new(list, json_pack("{s:O, s:o}", "name", n, "arguments", args));
    }
    char *body = dump_spaced(list);
    json_decref(list);
    if (!body) return oom(e);
    size_t len = strlen(body);
    *out = malloc(sizeof CALL_OPEN + len + sizeof CALL_CLOSE);
    if (*out) snprintf(*out, sizeof CALL_OPEN + len + sizeof CALL_CLOSE, "%s%s%s", CALL_OPEN, body, CALL_CLOSE);
    free(body);
    return *out ? 0 : oom(e);
}

void srv_tool_call_id(char *out, size_t size, const char *id, int index, size_t k) {
    const char *hex = strpbrk(id, "-_");
    snprintf(out, size, "call_%s_%d_%zu", hex ? hex + 1 : id, index, k);
}

/* One call of the model's: {"name": N, "arguments" (or "parameters"): object or JSON text} as
 * OpenAI's {"id", "type", "function": {"name", "arguments": text}}; NULL when it is not one.
 * raw: the arguments as written, whitespace outside strings dropped (call_reader.h), when read. */
static json_t *openai_call(const json_t *c, const char *raw, const char *id, int index, size_t k) {
    const json_t *n = json_is_object(c) ? json_object_get(c, "name") : NULL;
    if (!json_is_string(n) || !name_ok(json_string_value(n))) return NULL;
    const json_t *a = json_object_get(c, "arguments");
    if (!a) a = json_object_get(c, "parameters");
    char *args;
    if (!a) args = strdup("{}");
    else if (json_is_string(a)) args = strdup(json_string_value(a));
    else if (json_is_object(a)) args = raw ? strdup(raw) : json_dumps(a, JSON_COMPACT);
    else return NULL;
    if (!args) return NULL;
    char cid[96];
    srv_tool_call_id(cid, sizeof cid, id, index, k);
    json_t *o = json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", cid, "type", "function", "function", "name", n, "arguments", args);
    free(args);
    return o;
}

json_t *srv_tool_calls_find(const char *text, size_t len, srv_tool_mode mode, size_t marker_at, size_t marker_end, const char *id,
                            int index, size_t *content_len) {
    *content_len = len;
    size_t from = 0, to = len, content = 0;
    if (mode == SRV_TOOLS_AUTO && marker_at <= len) {
        from = content = marker_at;
        if (marker_end >= from && marker_end <= len) to = marker_end;
    } else if (mode == SRV_TOOLS_AUTO) {
        while (from < len && isspace((unsigned char)text[from])) from++;
        if (len - from < sizeof FUNCTOOLS - 1 || memcmp(text + from, FUNCTOOLS, sizeof FUNCTOOLS - 1)) return NULL;
        from += sizeof FUNCTOOLS - 1;
    } else if (mode != SRV_TOOLS_FORCED) {
        return NULL;
    }
    json_t *v = json_loadb(text + from, to - from, JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, NULL);
    json_t *one = json_is_object(v) ? json_pack("[O]", v) : NULL, *list = one ? one : v;
    json_t *calls = json_is_array(list) && json_array_size(list) ? json_array() : NULL;
    srv_call_reader rd = {0}; /* the arguments as written, as a stream sends them */
    srv_call_reader_read(&rd, text, from, to);
    int raw = calls && srv_call_reader_complete(&rd) && (size_t)rd.n == json_array_size(list);
    size_t k;
    json_t *c;
    json_array_foreach(calls ? list : NULL, k, c) {
        json_t *oc = openai_call(c, raw && rd.calls[k].args_done ? rd.calls[k].args : NULL, id, index, k);
        if (!oc) {
            json_decref(calls);
            calls = NULL;
            break;
        }
        json_array_append_new(calls, oc);
    }
    srv_call_reader_free(&rd);
    json_decref(one);
    json_decref(v);
    if (!calls) return NULL;
    while (content > 0 && isspace((unsigned char)text[content - 1])) content--;
    *content_len = content;
    return calls;
}

size_t srv_tool_content_ready(const char *text, size_t len, size_t marker_at) {
    size_t ready = marker_at < len ? marker_at : len, p = 0;
    while (p < ready && isspace((unsigned char)text[p])) p++;
    size_t k = ready - p < sizeof FUNCTOOLS - 1 ? ready - p : sizeof FUNCTOOLS - 1;
    if (!memcmp(text + p, FUNCTOOLS, k)) return 0; /* nothing yet, or what may still be "functools[...]" */
    return ready;
}
