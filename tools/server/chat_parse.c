/* chat_parse.c — see chat_parse.h. Order of work: generation parameters (cheap checks first),
 * then messages: roles, content parts, media bytes, placeholder text; then the chat template and
 * the placeholder/media count check the engine would otherwise make later. */
#include "chat_parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base64.h"
#include "dataurl.h"
#include "json_util.h"
#include "local_media.h"
#include "media_urls.h"
#include "tool_calls.h"
#include "engine/json_schema.h"
#include "engine/grammar.h"
#include "engine/regex.h"
#include "tok/chat.h"

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int srv_has_placeholder(const char *t) {
    for (const char *p = strstr(t, "<|"); p; p = strstr(p + 2, "<|")) {
        const char *q = p + 2;
        if (!strncmp(q, "image_", 6)) q += 6;
        else if (!strncmp(q, "audio_", 6)) q += 6;
        else continue;
        if (!isdigit((unsigned char)*q)) continue;
        while (isdigit((unsigned char)*q)) q++;
        if (q[0] == '|' && q[1] == '>') return 1;
    }
    return 0;
}

void srv_chat_req_free(srv_chat_req *r) {
    free(r->prompt);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_images; i++) free(r->images[i].data);
    for (int i = 0; i < r->n_audios; i++) free(r->audios[i].data);
    free(r->images);
    free(r->audios);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop_ids);
    free(r->allowed_ids);
    for (int i = 0; i < r->n_bad_words; i++) free(r->bad_words[i]);
    free(r->bad_words);
    free(r->echo_text);
    free(r->logit_bias);
    free(r->json_schema);
    free(r->guide);
    free(r->cache_salt);
    free(r->prediction);
    free(r->tools_text);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------ parameters */

static int parse_stop(const json_t *root, srv_chat_req *r, srv_error *e) {
    const json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v)) return 0;
    const json_t *one[1] = {v};
    size_t n = 1;
    if (json_is_array(v)) n = json_array_size(v);
    else if (!json_is_string(v)) return srv_bad(e, "stop", "invalid_type", "stop must be a string or an array of strings");
    if (n > SRV_MAX_STOP) return srv_bad(e, "stop", "invalid_value", "stop accepts at most %d sequences (got %zu)", SRV_MAX_STOP, n);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(s)) return srv_bad(e, "stop", "invalid_type", "stop[%zu] must be a string", i);
        size_t l = json_string_length(s);
        if (l == 0) return srv_bad(e, "stop", "invalid_value", "stop[%zu] is empty", i);
        if (l > SRV_MAX_STOP_LEN) return srv_bad(e, "stop", "invalid_value", "stop[%zu] is longer than %d bytes", i, SRV_MAX_STOP_LEN);
        r->stop[r->n_stop] = strndup(json_string_value(s), l);
        if (!r->stop[r->n_stop]) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        r->n_stop++;
    }
    return 0;
}

/* The JSON array a of token ids into ids[0, size(a)) (malloc'd by the caller): each an integer in
 * [0, 2^31); whether the model has it is the engine's to check. -1 naming where[i] at the first other. */
static int read_ids(const json_t *a, const char *where, int32_t *ids, srv_error *e) {
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            srv_bad(e, NULL, json_is_integer(v) ? "invalid_value" : "invalid_type", "%s[%zu] must be a token id (an integer >= 0)", where, i);
            snprintf(e->param, sizeof e->param, "%s[%zu]", where, i);
            return -1;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    return 0;
}

/* An array of at most max token ids at key (absent or null: none): *ids malloc'd. */
static int parse_id_list(const json_t *root, const char *key, int max, int32_t **ids, int *n_ids, srv_error *e) {
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v)) return srv_bad(e, key, "invalid_type", "%s must be an array of token ids", key);
    size_t n = json_array_size(v);
    if (n > (size_t)max) return srv_bad(e, key, "invalid_value", "%s holds at most %d ids (got %zu)", key, max, n);
    if (n && !(*ids = malloc(sizeof(int32_t) * n))) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (read_ids(v, key, *ids, e)) return -1;
    *n_ids = (int)n;
    return 0;
}

/* vLLM's bad_words: an array of non-empty strings (the engine tokenizes them). */
static int parse_bad_words(const json_t *root, srv_chat_req *r, srv_error *e) {
    const json_t *v = json_object_get(root, "bad_words");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v)) return srv_bad(e, "bad_words", "invalid_type", "bad_words must be an array of strings");
    size_t n = json_array_size(v);
    if (n > PM_MAX_BAD_WORDS) return srv_bad(e, "bad_words", "invalid_value", "bad_words holds at most %d words (got %zu)", PM_MAX_BAD_WORDS, n);
    if (n && !(r->bad_words = calloc(n, sizeof *r->bad_words))) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *w = json_array_get(v, i);
        char param[32];
        snprintf(param, sizeof param, "bad_words[%zu]", i);
        if (!json_is_string(w)) return srv_bad(e, param, "invalid_type", "%s must be a string", param);
        const char *t = json_string_value(w);
        size_t len = json_string_length(w), lead = strspn(t, " \t\n\r\v\f");
        if (len == lead || len - lead > PM_MAX_BAD_WORD_BYTES || strlen(t) != len)
            return srv_bad(e, param, "invalid_value", "%s must hold 1..%d bytes besides leading whitespace, no NUL", param, PM_MAX_BAD_WORD_BYTES);
        if (!(r->bad_words[r->n_bad_words] = strdup(t))) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        r->n_bad_words++;
    }
    return 0;
}

/* vLLM's stop_token_ids, include_stop_str_in_output and skip_special_tokens, allowed_token_ids and
 * bad_words. */
static int parse_stop_extras(const json_t *root, srv_chat_req *r, srv_error *e) {
    if (parse_id_list(root, "stop_token_ids", PM_MAX_STOP_IDS, &r->stop_ids, &r->n_stop_ids, e) ||
        parse_id_list(root, "allowed_token_ids", PM_MAX_ALLOWED_IDS, &r->allowed_ids, &r->n_allowed_ids, e) || parse_bad_words(root, r, e))
        return -1;
    int skip = 1;
    if (srv_get_bool(root, "include_stop_str_in_output", &r->stop_in_output, e) < 0 || srv_get_bool(root, "skip_special_tokens", &skip, e) < 0 ||
        srv_get_bool(root, "return_tokens_as_token_ids", &r->tokens_as_ids, e) < 0)
        return -1;
    long long tp = 0;
    int got = srv_get_int(root, "truncate_prompt_tokens", -1, 1 << 24, &tp, e);
    if (got < 0) return -1;
    if (got && tp == 0)
        return srv_bad(e, "truncate_prompt_tokens", "invalid_value", "truncate_prompt_tokens must be -1 (as many as fit) or positive");
    r->truncate_prompt = (int)tp;
    r->keep_special = !skip;
    return 0;
}

/* Chat's template switches (vLLM's): add_generation_prompt (default true) and continue_final_message
 * (default false: the final message left open for the model to go on with, an answer's prefill),
 * not both; echo: the answer's text begins with the final message's when that one is the assistant's. */
static int parse_template_switches(const json_t *root, srv_chat_req *r, srv_error *e) {
    int gen = 1, cont = 0;
    int gen_given = srv_get_bool(root, "add_generation_prompt", &gen, e);
    if (gen_given < 0 || srv_get_bool(root, "continue_final_message", &cont, e) < 0 || srv_get_bool(root, "echo", &r->chat_echo, e) < 0)
        return -1;
    if (cont && gen_given && gen)
        return srv_bad(e, "continue_final_message", "invalid_value",
                       "continue_final_message and add_generation_prompt cannot both be true (the one continues the final message, the "
                       "other opens a new assistant turn)");
    r->chat_end = cont ? PM_CHAT_CONTINUE : gen ? PM_CHAT_GENERATE : PM_CHAT_END_EOS;
    if (r->keep_special && r->tool_mode == SRV_TOOLS_AUTO) /* the calls' markers would land in their text */
        return srv_bad(e, "skip_special_tokens", "invalid_value",
                       "skip_special_tokens false cannot be combined with tools the model may call (tool_choice auto): the calls come "
                       "back as tool_calls, read between their special tokens");
    /* a held value would begin after the prefix, not at the answer's start */
    if (cont && r->format != PM_FORMAT_TEXT && r->tool_mode != SRV_TOOLS_AUTO)
        return srv_bad(e, "continue_final_message", "invalid_value",
                       "continue_final_message cannot be combined with response_format, guided decoding or a forced tool_choice: the "
                       "held value would have to begin after the final message's text");
    return 0;
}

/* Log-probabilities: chat's logprobs is a boolean with top_logprobs 0..20 beside it; a
 * completions request's logprobs is the count of alternatives (0..5), absent or null for none. */
static int parse_logprobs(const json_t *root, int completions, srv_chat_req *r, srv_error *e) {
    long long k = 0;
    /* vLLM's prompt_logprobs (both APIs): the prompt's own tokens scored, with k alternatives each;
     * true is 1 and false none (vLLM reads false as 0, the tokens alone); -1 (vLLM: the whole
     * vocabulary) is refused as above 20. Not with stream, as vLLM. */
    const json_t *pl = json_object_get(root, "prompt_logprobs");
    if (json_is_boolean(pl)) r->prompt_logprobs = json_is_true(pl), r->prompt_top = json_is_true(pl);
    else if (pl && !json_is_null(pl)) {
        if (srv_get_int(root, "prompt_logprobs", 0, PM_MAX_TOP_LOGPROBS, &k, e) < 0) return -1;
        r->prompt_logprobs = 1;
        r->prompt_top = (int)k;
    }
    if (r->prompt_logprobs && r->stream)
        return srv_bad(e, "prompt_logprobs", "invalid_value", "prompt_logprobs are not available when stream is true");
    k = 0;
    if (completions) {
        int got = srv_get_int(root, "logprobs", 0, 5, &k, e);
        if (got < 0) return -1;
        r->logprobs = got;
        r->top_logprobs = (int)k;
        return 0;
    }
    if (srv_get_bool(root, "logprobs", &r->logprobs, e) < 0) return -1;
    if (srv_get_int(root, "top_logprobs", 0, PM_MAX_TOP_LOGPROBS, &k, e) < 0) return -1;
    if (k > 0 && !r->logprobs) return srv_bad(e, "top_logprobs", "invalid_value", "top_logprobs needs logprobs: true");
    r->top_logprobs = (int)k;
    return 0;
}

/* OpenAI's penalties, Hugging Face's repetition penalty, min_tokens and ignore_eos (vLLM's
 * extensions) and logit_bias, an object of token ids (decimal strings) to biases in [-100, 100];
 * the engine checks the ids against the vocabulary. */
static int parse_penalties(const json_t *root, srv_chat_req *r, srv_error *e) {
    double f = 0, p = 0, rep = 0;
    if (srv_get_num(root, "frequency_penalty", -2.0, 2.0, &f, e) < 0 || srv_get_num(root, "presence_penalty", -2.0, 2.0, &p, e) < 0)
        return -1;
    int got = srv_get_num(root, "repetition_penalty", 0.0, 10.0, &rep, e);
    if (got < 0) return -1;
    if (got && rep == 0) return srv_bad(e, "repetition_penalty", "invalid_value", "repetition_penalty must be above 0 (1: off)");
    long long mt = 0;
    if (srv_get_int(root, "min_tokens", 0, 1 << 24, &mt, e) < 0 || srv_get_bool(root, "ignore_eos", &r->ignore_eos, e) < 0) return -1;
    r->min_tokens = (int)mt;
    r->sampling.frequency_penalty = (float)f;
    r->sampling.presence_penalty = (float)p;
    r->sampling.repetition_penalty = (float)rep;
    const json_t *v = json_object_get(root, "logit_bias"), *b;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return srv_bad(e, "logit_bias", "invalid_type", "logit_bias must be an object of token ids to biases");
    size_t n = json_object_size(v);
    if (n > PM_MAX_LOGIT_BIAS)
        return srv_bad(e, "logit_bias", "invalid_value", "logit_bias holds at most %d tokens (got %zu)", PM_MAX_LOGIT_BIAS, n);
    if (n && !(r->logit_bias = malloc(sizeof *r->logit_bias * n))) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    const char *key;
    json_object_foreach((json_t *)v, key, b) {
        char *end;
        errno = 0;
        long t = strtol(key, &end, 10);
        if (!*key || *end || errno || t < 0 || t > INT32_MAX || !isdigit((unsigned char)key[0]))
            return srv_bad(e, "logit_bias", "invalid_value", "logit_bias key '%.40s' is not a token id", key);
        if (!json_is_number(b) || !(json_number_value(b) >= -100 && json_number_value(b) <= 100))
            return srv_bad(e, "logit_bias", "invalid_value", "logit_bias['%s'] must be a number between -100 and 100", key);
        r->logit_bias[r->n_logit_bias].token = (int32_t)t;
        r->logit_bias[r->n_logit_bias++].bias = (float)json_number_value(b);
    }
    return 0;
}

/* The answer held to schema sch (NULL: any value), compiled here so that one the engine cannot hold
 * an answer to is a 400 naming the keyword (param: where it came from). */
static int set_schema(const json_t *sch, const char *param, srv_chat_req *r, srv_error *e) {
    r->format = PM_FORMAT_JSON_SCHEMA;
    r->json_schema = sch ? json_dumps(sch, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("true");
    if (!r->json_schema) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    pm_json_schema *compiled = NULL;
    pm_err pe = {0};
    int rc = pm_json_schema_compile(r->json_schema, &compiled, &pe);
    if (rc) return srv_bad(e, param, rc == PM_EUNSUPPORTED ? "unsupported_value" : "invalid_value", "%s", pe.msg);
    pm_json_schema_free(compiled);
    return 0;
}

/* The answer held to a pattern (PM_FORMAT_REGEX) or a GBNF or Lark grammar (PM_FORMAT_GRAMMAR), text owned
 * by r from here, compiled here so that a bad one is a 400 naming the construct (the rule) and its
 * byte. */
static int set_guide(char *text, pm_format format, const char *param, srv_chat_req *r, srv_error *e) {
    if (!text) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    r->format = format;
    r->guide = text;
    pm_err pe = {0};
    int rc;
    if (format == PM_FORMAT_GRAMMAR) {
        pm_grammar *g = NULL;
        rc = pm_grammar_compile(text, strlen(text), &g, &pe);
        pm_grammar_free(g);
    } else {
        pm_regex *rx = NULL;
        rc = pm_regex_compile(text, strlen(text), &rx, &pe);
        pm_regex_free(rx);
    }
    if (rc == PM_ENOMEM) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (rc) /* GBNF and Lark are told apart by the first definition: say which notation it was read as */
        return srv_bad(e, param, rc == PM_EUNSUPPORTED ? "unsupported_value" : "invalid_value", "%s%s", pe.msg,
                       format != PM_FORMAT_GRAMMAR ? ""
                       : pm_grammar_is_lark(text, strlen(text)) ? " (read as Lark: its first definition is `name:`)"
                                                                : " (read as GBNF: its first definition is `name ::=`)");
    return 0;
}

/* A list of 1..PM_MAX_CHOICES strings as the escaped alternation of them. */
static int set_choices(const json_t *v, const char *param, srv_chat_req *r, srv_error *e) {
    size_t n = json_is_array(v) ? json_array_size(v) : 0, i;
    if (!n || n > PM_MAX_CHOICES) return srv_bad(e, param, "invalid_value", "%s must be an array of 1 to %d strings", param, PM_MAX_CHOICES);
    const char **c = malloc(sizeof *c * n);
    if (!c) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    const json_t *x;
    size_t bytes = 0;
    json_array_foreach(v, i, x) {
        if (!json_is_string(x) || strlen(json_string_value(x)) != json_string_length(x)) {
            free(c);
            return srv_bad(e, param, "invalid_value", "%s[%zu] must be a string (without NUL)", param, i);
        }
        c[i] = json_string_value(x);
        bytes += json_string_length(x);
    }
    if (bytes > PM_REGEX_MAX_PATTERN / 2) {
        free(c);
        return srv_bad(e, param, "limit_exceeded", "%s holds %zu bytes, more than %d", param, bytes, PM_REGEX_MAX_PATTERN / 2);
    }
    pm_err pe = {0};
    char *p = pm_regex_of_choices(c, (int)n, &pe);
    free(c);
    return set_guide(p, PM_FORMAT_REGEX, param, r, e);
}

/* vLLM's guided decoding: guided_json (a schema, as an object or as JSON text), guided_regex,
 * guided_choice, guided_grammar (GBNF or Lark; llama.cpp's server calls it grammar), or their newer
 * spelling structured_outputs {json | regex | choice | json_object | grammar}; at most one of them,
 * and not beside a response_format that shapes the answer. A whitespace pattern is refused: no
 * silent loosening of what the client asked to hold. guided_decoding_backend is a choice among
 * vLLM's engines and is ignored. */
static int parse_guided(const json_t *root, srv_chat_req *r, srv_error *e) {
    const json_t *ws = json_object_get(root, "guided_whitespace_pattern");
    if (ws && !json_is_null(ws))
        return srv_bad(e, "guided_whitespace_pattern", "unsupported_parameter",
                       "guided_whitespace_pattern is not supported by this server (guided_json, guided_regex, guided_choice and guided_grammar are)");
    const json_t *so = json_object_get(root, "structured_outputs");
    if (so && !json_is_null(so) && !json_is_object(so))
        return srv_bad(e, "structured_outputs", "invalid_type", "structured_outputs must be an object");
    enum { G_JSON, G_REGEX, G_CHOICE, G_JSON_OBJECT, G_GRAMMAR };
    static const struct {
        const char *key, *sub; /* sub: the member of structured_outputs (NULL: a top-level key) */
        int kind;
    } spell[] = {{"guided_json", NULL, G_JSON},
                 {"guided_regex", NULL, G_REGEX},
                 {"guided_choice", NULL, G_CHOICE},
                 {"guided_grammar", NULL, G_GRAMMAR},
                 {"grammar", NULL, G_GRAMMAR}, /* llama.cpp server's */
                 {"structured_outputs.json", "json", G_JSON},
                 {"structured_outputs.regex", "regex", G_REGEX},
                 {"structured_outputs.choice", "choice", G_CHOICE},
                 {"structured_outputs.json_object", "json_object", G_JSON_OBJECT},
                 {"structured_outputs.grammar", "grammar", G_GRAMMAR}};
    enum { N_SPELL = sizeof spell / sizeof spell[0] };
    const char *keys[N_SPELL];
    const json_t *val[N_SPELL];
    int given = -1;
    for (int k = 0; k < N_SPELL; k++) {
        keys[k] = spell[k].key;
        val[k] = !spell[k].sub ? json_object_get(root, spell[k].key) : json_is_object(so) ? json_object_get(so, spell[k].sub) : NULL;
        if (!val[k] || json_is_null(val[k]) || (spell[k].kind == G_JSON_OBJECT && json_is_false(val[k]))) continue;
        if (given >= 0 || r->format != PM_FORMAT_TEXT)
            return srv_bad(e, keys[k], "invalid_value", "%s cannot be combined with %s: one of response_format, guided_json, guided_regex, "
                           "guided_choice, guided_grammar (grammar) and structured_outputs may shape the answer", keys[k], given >= 0 ? keys[given] : "response_format");
        given = k;
    }
    if (given < 0) return 0;
    const json_t *v = val[given];
    switch (spell[given].kind) {
    case G_JSON: { /* a schema: an object, a boolean, or its JSON text */
        if (json_is_string(v)) {
            json_error_t je;
            json_t *sch = json_loads(json_string_value(v), JSON_DECODE_ANY, &je);
            if (!sch || !(json_is_object(sch) || json_is_boolean(sch))) {
                json_decref(sch);
                return srv_bad(e, keys[given], "invalid_value", "%s must be a JSON Schema (an object, or its JSON text)", keys[given]);
            }
            int rc = set_schema(sch, keys[given], r, e);
            json_decref(sch);
            return rc;
        }
        if (!json_is_object(v) && !json_is_boolean(v))
            return srv_bad(e, keys[given], "invalid_type", "%s must be a JSON Schema (an object, or its JSON text)", keys[given]);
        return set_schema(v, keys[given], r, e);
    }
    case G_REGEX:
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
            return srv_bad(e, keys[given], "invalid_type", "%s must be a string (a regular expression)", keys[given]);
        if (json_string_length(v) > PM_REGEX_MAX_PATTERN)
            return srv_bad(e, keys[given], "limit_exceeded", "%s holds more than %d bytes", keys[given], PM_REGEX_MAX_PATTERN);
        return set_guide(strdup(json_string_value(v)), PM_FORMAT_REGEX, keys[given], r, e);
    case G_CHOICE: return set_choices(v, keys[given], r, e);
    case G_GRAMMAR:
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
            return srv_bad(e, keys[given], "invalid_type", "%s must be a string (a GBNF or Lark grammar)", keys[given]);
        if (json_string_length(v) > PM_GRAMMAR_MAX_TEXT)
            return srv_bad(e, keys[given], "limit_exceeded", "%s holds more than %d bytes", keys[given], PM_GRAMMAR_MAX_TEXT);
        return set_guide(strdup(json_string_value(v)), PM_FORMAT_GRAMMAR, keys[given], r, e);
    case G_JSON_OBJECT:
        if (!json_is_true(v)) return srv_bad(e, keys[given], "invalid_type", "%s must be a boolean", keys[given]);
        r->format = PM_FORMAT_JSON_OBJECT;
        return 0;
    }
    return srv_bad(e, keys[given], "unsupported_parameter", "%s is not supported by this server", keys[given]);
}

/* response_format: text, json_object (JSON mode) or json_schema (its schema compiled here, so
 * that one the engine cannot hold an answer to is a 400 naming the keyword). */
static int parse_format(const json_t *root, srv_chat_req *r, srv_error *e) {
    const json_t *v = json_object_get(root, "response_format");
    if (!v || json_is_null(v)) return 0;
    const json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_string(t)) return srv_bad(e, "response_format", "invalid_type", "response_format must be an object with a string type");
    const char *type = json_string_value(t);
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        r->format = PM_FORMAT_JSON_OBJECT;
        return 0;
    }
    if (strcmp(type, "json_schema"))
        return srv_bad(e, "response_format.type", "invalid_value", "response_format type '%.40s' is not one of text, json_object, json_schema", type);
    const json_t *js = json_object_get(v, "json_schema"), *sch = json_is_object(js) ? json_object_get(js, "schema") : NULL;
    if (!json_is_object(js)) return srv_bad(e, "response_format.json_schema", "invalid_type", "response_format.json_schema must be an object");
    if (sch && !json_is_object(sch) && !json_is_boolean(sch))
        return srv_bad(e, "response_format.json_schema.schema", "invalid_type", "response_format.json_schema.schema must be an object");
    return set_schema(sch, "response_format.json_schema.schema", r, e);
}

/* Parameters we do not implement are refused when they would change the output; suffix and
 * best_of are completions' own. */
static int refuse_unsupported(const json_t *root, int completions, int n, srv_error *e) {
    const json_t *v;
    if (completions) {
        long long best = 1;
        if ((v = json_object_get(root, "suffix")) && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v)))
            return srv_bad(e, "suffix", "unsupported_parameter", "suffix (insertion) is not supported by this server");
        int got = srv_get_int(root, "best_of", 1, 20, &best, e);
        if (got < 0) return -1;
        if (got && best != n)
            return srv_bad(e, "best_of", "unsupported_value", "only best_of = n (every sample returned) is supported (got %lld, n %d)", best, n);
    }
    if (completions && (v = json_object_get(root, "tools")) && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
        return srv_bad(e, "tools", "unsupported_parameter", "tools (function calling) belong to /v1/chat/completions");
    if ((v = json_object_get(root, "functions")) && !json_is_null(v))
        return srv_bad(e, "functions", "unsupported_parameter", "functions are not supported by this server");
    if ((v = json_object_get(root, "modalities")) && json_is_array(v)) {
        size_t i;
        const json_t *m;
        json_array_foreach(v, i, m) if (!json_is_string(m) || strcmp(json_string_value(m), "text"))
            return srv_bad(e, "modalities", "unsupported_parameter", "this model only produces text (modalities: [\"text\"])");
    }
    return 0;
}

/* cache_salt (vLLM's): a non-empty string of at most PM_MAX_CACHE_SALT bytes; the prompt cache and
 * the media cache then reuse only what requests with the same salt left (pm_request.cache_salt). */
static int parse_cache_salt(const json_t *root, srv_chat_req *r, srv_error *e) {
    const char *salt = NULL;
    int got = srv_get_str(root, "cache_salt", &salt, e);
    if (got <= 0) return got;
    size_t n = strlen(salt);
    if (n == 0 || n > PM_MAX_CACHE_SALT || n != json_string_length(json_object_get(root, "cache_salt")))
        return srv_bad(e, "cache_salt", "invalid_value", "cache_salt must be a non-empty string of at most %d bytes without NUL", PM_MAX_CACHE_SALT);
    if (!(r->cache_salt = strdup(salt))) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* mm_processor_kwargs (vLLM's): the image processor's settings for this request; of the official
 * processor's, dynamic_hd (at most that many HD crops per image: pm_request.max_crops). */
static int parse_mm_kwargs(const json_t *root, srv_chat_req *r, srv_error *e) {
    const json_t *kw = json_object_get(root, "mm_processor_kwargs");
    if (!kw || json_is_null(kw)) return 0;
    if (!json_is_object(kw)) return srv_bad(e, "mm_processor_kwargs", "invalid_type", "mm_processor_kwargs must be an object");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)kw, k, v) {
        if (strcmp(k, "dynamic_hd"))
            return srv_bad(e, "mm_processor_kwargs", "unsupported_parameter", "mm_processor_kwargs.%.64s is not supported (dynamic_hd is)", k);
    }
    long long d = 0;
    if (srv_get_int(kw, "dynamic_hd", 1, 4096, &d, e) < 0) {
        snprintf(e->param, sizeof e->param, "mm_processor_kwargs.dynamic_hd");
        return -1;
    }
    r->max_crops = (int)d;
    return 0;
}

/* prediction (OpenAI's Predicted Outputs): {"type": "content", "content": a string or text parts},
 * the text the answer should repeat much of; drafts come from it (pm_request.prediction), the
 * answer is the same. */
static int parse_prediction(const json_t *root, srv_chat_req *r, srv_error *e) {
    const json_t *p = json_object_get(root, "prediction");
    if (!p || json_is_null(p)) return 0;
    if (!json_is_object(p)) return srv_bad(e, "prediction", "invalid_type", "prediction must be an object {\"type\": \"content\", \"content\": ...}");
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type || strcmp(type, "content"))
        return srv_bad(e, "prediction.type", "invalid_value", "prediction.type must be \"content\"");
    const json_t *c = json_object_get(p, "content");
    sbuf b = {0};
    if (json_is_string(c)) {
        if (sb_put(&b, json_string_value(c), json_string_length(c))) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    } else if (json_is_array(c)) {
        size_t i;
        const json_t *part;
        json_array_foreach(c, i, part) {
            const json_t *tx = json_object_get(part, "text");
            const char *pt = json_string_value(json_object_get(part, "type"));
            if (!pt || strcmp(pt, "text") || !json_is_string(tx)) {
                free(b.p);
                char param[64];
                snprintf(param, sizeof param, "prediction.content[%zu]", i);
                return srv_bad(e, param, "invalid_value", "%s must be a text part {\"type\": \"text\", \"text\": ...}", param);
            }
            if (sb_put(&b, json_string_value(tx), json_string_length(tx))) {
                free(b.p);
                return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            }
        }
    } else
        return srv_bad(e, "prediction.content", "invalid_type", "prediction.content must be a string or an array of text parts");
    if (b.p && strlen(b.p) != b.n) {
        free(b.p);
        return srv_bad(e, "prediction.content", "invalid_value", "prediction.content holds a NUL character");
    }
    if (b.n > PM_MAX_PREDICTION) {
        free(b.p);
        return srv_bad(e, "prediction.content", "limit_exceeded", "prediction.content holds %zu bytes, more than %d", b.n, PM_MAX_PREDICTION);
    }
    r->prediction = b.p;
    return 0;
}

/* tools / tool_choice (tool_calls.h): a forced choice holds the answer to its calls' schema, so
 * it and response_format cannot both shape it; auto mode would have its calls' markers masked. */
static int parse_tools(const json_t *root, srv_chat_req *r, srv_error *e) {
    char *schema = NULL;
    if (srv_tools_parse(root, &r->tool_mode, &r->tools_text, &schema, e)) return -1;
    if (r->tool_mode != SRV_TOOLS_OFF && r->format != PM_FORMAT_TEXT) {
        free(schema);
        return srv_bad(e, "response_format", "invalid_value",
                       "response_format json_object / json_schema and guided decoding cannot be combined with tools (use tool_choice none)");
    }
    if (schema) { /* forced: the whole answer; auto: after the model's <|tool_call|> (scheduler.c) */
        r->format = PM_FORMAT_JSON_SCHEMA;
        r->json_schema = schema;
    }
    return 0;
}

static int parse_params(const json_t *root, int completions, srv_chat_req *r, srv_error *e) {
    const char *model = NULL;
    if (srv_get_str(root, "model", &model, e) < 0) return -1;
    long long n = 1;
    if (srv_get_int(root, "n", 1, SRV_MAX_CHOICES, &n, e) < 0) return -1;
    r->n = (int)n;
    long long mt = 0;
    int got = srv_get_int(root, "max_completion_tokens", 1, 1 << 24, &mt, e);
    if (got < 0) return -1;
    if (completions && srv_get_bool(root, "echo", &r->echo, e) < 0) return -1;
    /* max_tokens 0 with echo: score the prompt (what evaluation harnesses send) */
    if (!got && (got = srv_get_int(root, "max_tokens", r->echo ? 0 : 1, 1 << 24, &mt, e)) < 0) return -1;
    r->max_tokens = (int)mt;
    r->score_only = got && mt == 0;
    double t = 0, tp = 1, mp = 0;
    if (srv_get_num(root, "temperature", 0.0, 2.0, &t, e) < 0) return -1;
    if (srv_get_num(root, "top_p", 0.0, 1.0, &tp, e) < 0) return -1;
    if (srv_get_num(root, "min_p", 0.0, 1.0, &mp, e) < 0) return -1;
    long long tk = 0;
    if (srv_get_int(root, "top_k", 0, 1 << 30, &tk, e) < 0) return -1;
    long long seed = 0;
    int sg = srv_get_int(root, "seed", -(1LL << 62), 1LL << 62, &seed, e);
    if (sg < 0) return -1;
    r->sampling.temperature = (float)t;
    r->sampling.top_p = (float)tp;
    r->sampling.min_p = (float)mp;
    r->sampling.top_k = (int)tk;
    r->sampling.seed = (uint64_t)seed;
    r->seed_given = sg;
    if (srv_get_bool(root, "stream", &r->stream, e) < 0) return -1;
    const json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return srv_bad(e, "stream_options", "invalid_type", "stream_options must be an object");
        int iu = 0, cu = 0;
        const char *bad = srv_get_bool(so, "include_usage", &iu, e) < 0 ? "include_usage"
                          : srv_get_bool(so, "continuous_usage_stats", &cu, e) < 0 ? "continuous_usage_stats" : NULL;
        if (bad) {
            snprintf(e->param, sizeof e->param, "stream_options.%s", bad);
            return -1;
        }
        r->include_usage = iu;
        r->continuous_usage = iu && cu; /* vLLM's: only beside include_usage */
    }
    if (parse_stop(root, r, e) || parse_stop_extras(root, r, e) || parse_logprobs(root, completions, r, e) || parse_penalties(root, r, e) || parse_format(root, r, e) ||
        parse_guided(root, r, e))
        return -1;
    if (refuse_unsupported(root, completions, r->n, e) || parse_cache_salt(root, r, e) || parse_mm_kwargs(root, r, e) ||
        parse_prediction(root, r, e))
        return -1;
    return completions ? 0 : parse_tools(root, r, e) || parse_template_switches(root, r, e);
}

/* ------------------------------------------------------------------ media */

static int add_blob(srv_blob **arr, int *n, int max, uint8_t *data, size_t len, const char *what, const char *fmt, const char *kind,
                    srv_error *e) {
    if (*n >= max) {
        free(data);
        return srv_bad(e, what, "too_many_media", "at most %d %s per request are accepted", max, kind);
    }
    if (!*arr) {
        *arr = calloc((size_t)max, sizeof **arr);
        if (!*arr) {
            free(data);
            return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        }
    }
    srv_blob *b = &(*arr)[(*n)++];
    b->data = data;
    b->len = len;
    snprintf(b->what, sizeof b->what, "%s", what);
    snprintf(b->format, sizeof b->format, "%s", fmt);
    return 0;
}

static int b64_media(const char *s, size_t n, const char *param, size_t max, uint8_t **out, size_t *len, srv_error *e) {
    char err[256];
    int rc = srv_b64_decode(s, n, out, len, err, sizeof err);
    if (rc == -2) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (rc) return srv_bad(e, param, "invalid_base64", "%s: %s", param, err);
    if (*len == 0) {
        free(*out);
        *out = NULL;
        return srv_bad(e, param, "invalid_value", "%s: the media data is empty", param);
    }
    if (*len > max) {
        free(*out);
        *out = NULL;
        return srv_fail(e, 413, "invalid_request_error", param, "media_too_large", "%s: media is larger than %zu bytes", param, max);
    }
    return 0;
}

/* The bytes of an image_url part or (vLLM's) audio_url part: its url a data: URL of the kind's media
 * type, an http(s) URL fetched for the request (lim->fetched, media_fetch.h), or an absolute path /
 * file:// URL under --allow-media-dir. */
static int url_part(const json_t *part, const char *where, int audio, const srv_parse_limits *lim, srv_chat_req *r, srv_error *e) {
    const char *key = audio ? "audio_url" : "image_url", *kind = audio ? "audio" : "image";
    const char *bad_url = audio ? "invalid_audio_url" : "invalid_image_url";
    char param[160];
    const json_t *iu = json_object_get(part, key);
    const json_t *url = json_is_string(iu) ? iu : json_is_object(iu) ? json_object_get(iu, "url") : NULL;
    snprintf(param, sizeof param, "%s.%s%s", where, key, json_is_object(iu) ? ".url" : "");
    if (!json_is_string(url)) return srv_bad(e, param, "invalid_type", "%s must be a string (a data:%s/...;base64,... URL)", param, kind);
    const char *u = json_string_value(url);
    size_t ul = json_string_length(url);
    uint8_t *data = NULL;
    size_t len = 0;
    char fmt[16] = "";
    if (srv_is_data_url(u, ul)) {
        srv_data_url d;
        char err[256];
        if (srv_data_url_parse(u, ul, &d, err, sizeof err)) return srv_bad(e, param, bad_url, "%s: %s", param, err);
        if (strncmp(d.media_type, kind, strlen(kind)) || d.media_type[strlen(kind)] != '/')
            return srv_bad(e, param, bad_url, "%s: expected an %s media type (data:%s/%s;base64,...), got '%s'", param, kind, kind,
                           audio ? "wav" : "png", d.media_type[0] ? d.media_type : "none");
        snprintf(fmt, sizeof fmt, "%.15s", d.media_type + strlen(kind) + 1);
        if (b64_media(d.payload, d.payload_len, param, lim->max_media_bytes, &data, &len, e)) return -1;
    } else if (srv_is_remote_url(u)) {
        const srv_fetched *f = srv_fetch_find(lim->fetched, u);
        if (!f)
            return srv_bad(e, param, "unsupported_url",
                           "%s: this server fetches no URLs (it was started without --allow-media-hosts); send the %s "
                           "inline as data:%s/<type>;base64,<data>",
                           param, kind, kind);
        if (f->err[0]) return srv_bad(e, param, bad_url, "%s: %s", param, f->err);
        if (!(data = malloc(f->len))) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(data, f->data, f->len);
        len = f->len;
    } else if (!strncmp(u, "file://", 7) || u[0] == '/') {
        char err[256];
        if (srv_read_local_media(lim->media_dir, u, lim->max_media_bytes, &data, &len, err, sizeof err))
            return srv_bad(e, param, bad_url, "%s: %s", param, err);
    } else {
        return srv_bad(e, param, bad_url, "%s must be a data:%s/<type>;base64,<data> URL", param, kind);
    }
    return audio ? add_blob(&r->audios, &r->n_audios, lim->max_audios, data, len, where, fmt, "audio clips", e)
                 : add_blob(&r->images, &r->n_images, lim->max_images, data, len, where, fmt, "images", e);
}

static int audio_part(const json_t *part, const char *where, const srv_parse_limits *lim, srv_chat_req *r, srv_error *e) {
    char param[160];
    const json_t *ia = json_object_get(part, "input_audio");
    snprintf(param, sizeof param, "%s.input_audio", where);
    if (!json_is_object(ia)) return srv_bad(e, param, "invalid_type", "%s must be an object {\"data\": base64, \"format\": ...}", param);
    const json_t *data = json_object_get(ia, "data"), *fmt = json_object_get(ia, "format");
    snprintf(param, sizeof param, "%s.input_audio.format", where);
    /* a label: the decoder tells the formats apart by their bytes (audio/wave.h) */
    static const char *const formats[] = {"wav", "mp3", "flac", "ogg", "m4a", "mp4", "webm"};
    if (!json_is_string(fmt)) return srv_bad(e, param, "invalid_type", "%s must be one of wav, mp3, flac, ogg, m4a, mp4, webm", param);
    const char *f = json_string_value(fmt);
    size_t k = 0;
    while (k < sizeof formats / sizeof formats[0] && strcmp(f, formats[k])) k++;
    if (k == sizeof formats / sizeof formats[0])
        return srv_bad(e, param, "invalid_value", "%s '%s' is not supported (wav, mp3, flac, ogg, m4a, mp4, webm)", param, f);
    snprintf(param, sizeof param, "%s.input_audio.data", where);
    if (!json_is_string(data)) return srv_bad(e, param, "invalid_type", "%s must be a base64 string", param);
    uint8_t *bytes = NULL;
    size_t len = 0;
    if (b64_media(json_string_value(data), json_string_length(data), param, lim->max_media_bytes, &bytes, &len, e)) return -1;
    return add_blob(&r->audios, &r->n_audios, lim->max_audios, bytes, len, where, f, "audio clips", e);
}

/* ------------------------------------------------------------------ messages */

static int role_ok(const char *role) {
    return !strcmp(role, "system") || !strcmp(role, "developer") || !strcmp(role, "user") || !strcmp(role, "assistant") ||
           !strcmp(role, "tool");
}

/* Pass 1: does any text hold an explicit placeholder? */
static int any_placeholder(const json_t *msgs) {
    size_t i, k;
    const json_t *m, *p;
    json_array_foreach(msgs, i, m) {
        const json_t *c = json_object_get(m, "content");
        if (json_is_string(c) && srv_has_placeholder(json_string_value(c))) return 1;
        if (json_is_array(c)) json_array_foreach(c, k, p) {
                const json_t *t = json_object_get(p, "text");
                if (json_is_string(t) && srv_has_placeholder(json_string_value(t))) return 1;
            }
    }
    return 0;
}

static int message_content(const json_t *m, size_t i, const char *role, const srv_parse_limits *lim, srv_chat_req *r, sbuf *b,
                           srv_error *e) {
    char where[96];
    const json_t *c = json_object_get(m, "content");
    snprintf(where, sizeof where, "messages[%zu].content", i);
    if (json_is_string(c)) return sb_put(b, json_string_value(c), json_string_length(c)) ? srv_fail(e, 500, "server_error", NULL, NULL, "out of memory") : 0;
    if (!json_is_array(c)) return srv_bad(e, where, "invalid_type", "%s must be a string or an array of content parts", where);
    size_t k;
    const json_t *part;
    json_array_foreach(c, k, part) {
        snprintf(where, sizeof where, "messages[%zu].content[%zu]", i, k);
        if (!json_is_object(part)) return srv_bad(e, where, "invalid_type", "%s must be an object", where);
        const json_t *ty = json_object_get(part, "type");
        char tparam[112];
        snprintf(tparam, sizeof tparam, "%s.type", where);
        if (!json_is_string(ty)) return srv_bad(e, tparam, "invalid_type", "%s must be a string", tparam);
        const char *t = json_string_value(ty);
        if (!strcmp(t, "text")) {
            const json_t *tx = json_object_get(part, "text");
            snprintf(tparam, sizeof tparam, "%s.text", where);
            if (!json_is_string(tx)) return srv_bad(e, tparam, "invalid_type", "%s must be a string", tparam);
            if (sb_put(b, json_string_value(tx), json_string_length(tx))) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            continue;
        }
        int is_img = !strcmp(t, "image_url"), is_aud_url = !strcmp(t, "audio_url"), is_aud = is_aud_url || !strcmp(t, "input_audio");
        if (!is_img && !is_aud)
            return srv_bad(e, tparam, "unknown_content_part",
                           "%s '%s' is not supported (expected text, image_url, input_audio or audio_url)", tparam, t);
        if (strcmp(role, "user"))
            return srv_bad(e, tparam, "invalid_value", "%s: %s parts are only accepted in user messages", tparam, t);
        if (is_img || is_aud_url ? url_part(part, where, is_aud_url, lim, r, e) : audio_part(part, where, lim, r, e)) return -1;
        if (!r->explicit_placeholders) {
            char ph[32];
            int len = snprintf(ph, sizeof ph, is_img ? "<|image_%d|>" : "<|audio_%d|>", is_img ? r->n_images : r->n_audios);
            if (sb_put(b, ph, (size_t)len)) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        }
    }
    return 0;
}

/* An assistant message's tool_calls after its content (the content may then be null). */
static int message_calls(const json_t *m, size_t i, const char *role, sbuf *b, srv_error *e) {
    const json_t *calls = json_object_get(m, "tool_calls");
    if (!calls || json_is_null(calls)) return 0;
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (strcmp(role, "assistant")) return srv_bad(e, param, "invalid_value", "%s: only assistant messages carry tool_calls", param);
    char *text = NULL;
    if (srv_tool_calls_render(calls, param, &text, e)) return -1;
    int rc = sb_put(b, text, strlen(text)) ? srv_fail(e, 500, "server_error", NULL, NULL, "out of memory") : 0;
    free(text);
    return rc;
}

static int parse_messages(const json_t *root, const srv_parse_limits *lim, srv_chat_req *r, srv_error *e) {
    const json_t *msgs = json_object_get(root, "messages");
    if (!msgs || json_is_null(msgs)) return srv_bad(e, "messages", "missing_required_parameter", "messages is required");
    if (!json_is_array(msgs)) return srv_bad(e, "messages", "invalid_type", "messages must be an array");
    size_t n = json_array_size(msgs);
    if (n == 0) return srv_bad(e, "messages", "invalid_value", "messages must not be empty");
    if (n > SRV_MAX_MESSAGES) return srv_bad(e, "messages", "invalid_value", "at most %d messages are accepted", SRV_MAX_MESSAGES);
    r->explicit_placeholders = any_placeholder(msgs);
    /* one more: the system message that carries the tools when the conversation has none */
    pm_chat_msg *all = calloc(n + 1, sizeof *all), *cm = all ? all + 1 : NULL;
    sbuf *texts = calloc(n, sizeof *texts);
    int rc = 0;
    if (!all || !texts) rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        const json_t *m = json_array_get(msgs, i);
        char where[64];
        snprintf(where, sizeof where, "messages[%zu]", i);
        if (!json_is_object(m)) {
            rc = srv_bad(e, where, "invalid_type", "%s must be an object", where);
            break;
        }
        const json_t *role = json_object_get(m, "role");
        snprintf(where, sizeof where, "messages[%zu].role", i);
        if (!json_is_string(role)) {
            rc = srv_bad(e, where, "invalid_type", "%s must be a string", where);
            break;
        }
        const char *ro = json_string_value(role);
        if (!role_ok(ro)) {
            rc = srv_bad(e, where, "invalid_value", "%s '%s' is not supported (system, developer, user, assistant, tool)", where, ro);
            break;
        }
        const json_t *c = json_object_get(m, "content"), *calls = json_object_get(m, "tool_calls");
        int calls_only = !strcmp(ro, "assistant") && calls && !json_is_null(calls) && (!c || json_is_null(c));
        if (!calls_only && (rc = message_content(m, i, ro, lim, r, &texts[i], e))) break;
        if ((rc = message_calls(m, i, ro, &texts[i], e))) break;
        if (!texts[i].p && sb_put(&texts[i], "", 0)) rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        cm[i].role = !strcmp(ro, "developer") ? "system" : ro;
        cm[i].content = texts[i].p;
    }
    if (!rc) {
        pm_chat_msg *first = cm;
        int count = (int)n;
        if (r->tools_text) { /* on the first system message, or on one of its own put first */
            size_t s = 0;
            while (s < n && strcmp(cm[s].role, "system")) s++;
            if (s == n) {
                first = all;
                count++;
                all[0].role = "system";
                all[0].content = "";
                s = (size_t)-1;
            }
            (s == (size_t)-1 ? &all[0] : &cm[s])->tools = r->tools_text;
        }
        pm_err pe = {0};
        if (r->chat_end == PM_CHAT_CONTINUE && cm[n - 1].tools)
            rc = srv_bad(e, "continue_final_message", "invalid_value",
                         "continue_final_message: the final message is the system message that carries the tools");
        else if (pm_chat_render(first, count, r->chat_end, &r->prompt, &pe))
            rc = srv_bad(e, "messages", "invalid_value", "%s", pe.msg);
        /* echo: the answer is the final assistant message's continuation (what the model saw of it) */
        if (!rc && r->chat_echo && !strcmp(cm[n - 1].role, "assistant") && !(r->echo_text = strdup(cm[n - 1].content)))
            rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (!rc) {
        pm_err pe = {0};
        char *rew = NULL;
        if (pm_prompt_rewrite_placeholders(r->prompt, r->n_images, r->n_audios, &rew, &pe))
            rc = srv_bad(e, "messages", "placeholder_mismatch", "%s (%d image(s) and %d audio clip(s) were sent)", pe.msg,
                         r->n_images, r->n_audios);
        free(rew);
    }
    for (size_t i = 0; texts && i < n; i++) free(texts[i].p);
    free(texts);
    free(all);
    return rc;
}

/* Every field parse_params and the routes read (or, documented, leave be: guided_decoding_backend
 * chooses among vLLM's engines). */
static const char *const known_fields[] = {
    "model", "n", "max_tokens", "max_completion_tokens", "temperature", "top_p", "min_p", "top_k", "seed", "stream", "stream_options",
    "stop", "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens", "return_tokens_as_token_ids", "truncate_prompt_tokens",
    "allowed_token_ids", "bad_words", "logprobs", "top_logprobs", "prompt_logprobs", "frequency_penalty", "presence_penalty",
    "repetition_penalty", "logit_bias", "min_tokens", "ignore_eos", "response_format", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "grammar", "guided_whitespace_pattern", "guided_decoding_backend", "structured_outputs", "functions", "modalities",
    "cache_salt", "mm_processor_kwargs", "prediction", "tools", "echo", NULL};
static const char *const chat_fields[] = {"messages", "tool_choice", "parallel_tool_calls", "add_generation_prompt", "continue_final_message",
                                          NULL};
static const char *const completion_fields[] = {"prompt", "suffix", "best_of", NULL};

int srv_field_listed(const char *name, const char *const *const *lists) {
    for (; *lists; lists++)
        for (const char *const *f = *lists; *f; f++)
            if (!strcmp(name, *f)) return 1;
    return 0;
}

void srv_field_note(const char *name, char *out, size_t cap) {
    size_t len = strlen(out);
    if (!*name) name = "\"\""; /* an empty name, named */
    if (len + strlen(name) + 6 < cap) {
        size_t at = len + (len ? 2 : 0);
        len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "", name);
        for (size_t i = at; i < len; i++) /* a header value and a log line: printable ASCII only */
            if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] >= 0x7f) out[i] = '?';
    } else if (len + 4 < cap && !strstr(out, "...")) {
        snprintf(out + len, cap - len, "...");
    }
}

int srv_unread_fields(const json_t *root, const char *const *const *lists, char *out, size_t cap) {
    const char *key;
    const json_t *v;
    int n = 0;
    if (cap) out[0] = 0;
    if (!json_is_object(root)) return 0;
    json_object_foreach((json_t *)root, key, v) {
        if (srv_field_listed(key, lists)) continue;
        n++;
        if (cap) srv_field_note(key, out, cap);
    }
    return n;
}

int srv_ignored_fields(const json_t *root, int completions, char *out, size_t cap) {
    const char *const *const lists[] = {known_fields, completions ? completion_fields : chat_fields, NULL};
    return srv_unread_fields(root, lists, out, cap);
}

int srv_chat_parse(const json_t *root, const srv_parse_limits *lim, srv_chat_req *out, srv_error *e) {
    memset(out, 0, sizeof *out);
    out->sampling.top_p = 1.0f;
    if (!json_is_object(root)) return srv_bad(e, NULL, "invalid_json", "the request body must be a JSON object");
    if (parse_params(root, 0, out, e)) return -1;
    return parse_messages(root, lim, out, e);
}

/* A prompt of token ids (a JSON array of integers): each in [0, 2^31); whether the model has the
 * id, and that it is no media placeholder, is the engine's to check when it plans the request. */
static int parse_prompt_ids(const json_t *a, const char *where, srv_chat_req *out, srv_error *e) {
    size_t n = json_array_size(a);
    if (!n) return srv_bad(e, where, "invalid_value", "%s must not be empty", where);
    if (n > (1u << 24)) return srv_bad(e, where, "invalid_value", "%s has %zu token ids, more than any context", where, n);
    out->prompt_ids = malloc(sizeof(int32_t) * n);
    if (!out->prompt_ids) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (read_ids(a, where, out->prompt_ids, e)) return -1;
    out->n_prompt_ids = (int)n;
    return 0;
}

/* An array that is one prompt of token ids rather than a list of prompts. */
static int is_id_prompt(const json_t *p) { return json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0)); }

int srv_completion_prompts(const json_t *root) {
    const json_t *p = json_is_object(root) ? json_object_get(root, "prompt") : NULL;
    return json_is_array(p) && !is_id_prompt(p) && json_array_size(p) > 1 ? (int)json_array_size(p) : 1;
}

int srv_completion_parse(const json_t *root, int which, srv_chat_req *out, srv_error *e) {
    memset(out, 0, sizeof *out);
    out->sampling.top_p = 1.0f;
    if (!json_is_object(root)) return srv_bad(e, NULL, "invalid_json", "the request body must be a JSON object");
    if (parse_params(root, 1, out, e)) return -1;
    const json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p)) return srv_bad(e, "prompt", "missing_required_parameter", "prompt is required");
    char where[32] = "prompt";
    if (is_id_prompt(p)) return parse_prompt_ids(p, where, out, e); /* one prompt of token ids */
    if (json_is_array(p)) {
        size_t k = json_array_size(p);
        if (!k) return srv_bad(e, "prompt", "invalid_value", "prompt must not be an empty array");
        if (k > SRV_MAX_CHOICES)
            return srv_bad(e, "prompt", "invalid_value", "%zu prompts, more than the %d a request may have", k, SRV_MAX_CHOICES);
        p = json_array_get(p, (size_t)which);
        snprintf(where, sizeof where, "prompt[%d]", which);
        if (json_is_array(p)) return parse_prompt_ids(p, where, out, e);
        if (!json_is_string(p)) return srv_bad(e, where, "invalid_type", "%s must be a string or an array of token ids", where);
    } else if (!json_is_string(p)) {
        return srv_bad(e, "prompt", "invalid_type", "prompt must be a string, or token ids");
    }
    if (!json_string_length(p)) return srv_bad(e, where, "invalid_value", "%s must not be empty", where);
    if (srv_has_placeholder(json_string_value(p)))
        return srv_bad(e, where, "placeholder_mismatch",
                       "/v1/completions takes no media: prompts with <|image_N|> or <|audio_N|> go to /v1/chat/completions");
    out->prompt = strdup(json_string_value(p));
    return out->prompt ? 0 : srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
}
