/* logprobs.c — see logprobs.h. */
#include "logprobs.h"

#include <stdio.h>

#include "json_util.h"

/* A token as the entries name it: its text, or with return_tokens_as_token_ids (vLLM's) "token_id:N",
 * whose own bytes the entry's bytes then are, as vLLM's. */
static const char *token_name(const pm_model *m, int32_t id, int as_id, char *buf, size_t cap, size_t *len) {
    if (as_id) {
        *len = (size_t)snprintf(buf, cap, "token_id:%d", (int)id);
        return buf;
    }
    const char *b = pm_model_token_bytes(m, id, len);
    if (!b) *len = 0;
    return b ? b : "";
}

static json_t *token_text(const pm_model *m, int32_t id, int as_id) {
    char buf[32];
    size_t len = 0;
    const char *b = token_name(m, id, as_id, buf, sizeof buf, &len);
    return srv_json_text(b, len);
}

static json_t *token_bytes(const pm_model *m, int32_t id, int as_id) {
    char buf[32];
    size_t len = 0;
    const unsigned char *b = (const unsigned char *)token_name(m, id, as_id, buf, sizeof buf, &len);
    json_t *a = json_array();
    for (size_t i = 0; a && i < len; i++) json_array_append_new(a, json_integer(b[i]));
    return a;
}

static json_t *chat_entry(const pm_model *m, pm_logprob p, int as_id) {
    json_t *o = json_object();
    json_object_set_new(o, "token", token_text(m, p.token, as_id));
    json_object_set_new(o, "logprob", json_real(p.logprob));
    json_object_set_new(o, "bytes", token_bytes(m, p.token, as_id));
    return o;
}

json_t *srv_logprobs_json(const srv_job *j, int from, int to) {
    const pm_model *m = j->ctx->model;
    json_t *o = json_object();
    if (j->kind != SRV_JOB_COMPLETION) {
        json_t *content = json_array();
        for (int i = from; i < to; i++) {
            const srv_lp *l = &j->lps[i];
            json_t *e = chat_entry(m, l->chosen, j->tokens_as_ids), *top = json_array();
            for (int k = 0; k < l->n_top; k++) json_array_append_new(top, chat_entry(m, l->top[k], j->tokens_as_ids));
            json_object_set_new(e, "top_logprobs", top);
            json_array_append_new(content, e);
        }
        json_object_set_new(o, "content", content);
        json_object_set_new(o, "refusal", json_null());
        return o;
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = from; i < to; i++) {
        const srv_lp *l = &j->lps[i];
        json_array_append_new(tokens, token_text(m, l->chosen.token, j->tokens_as_ids));
        json_array_append_new(offs, json_integer((json_int_t)l->offset));
        if (l->unscored) { /* the echoed prompt's first token: nothing before it */
            json_array_append_new(lps, json_null());
            json_array_append_new(tops, json_null());
            continue;
        }
        json_array_append_new(lps, json_real(l->chosen.logprob));
        json_t *t = json_object();
        for (int k = 0; k < l->n_top; k++) {
            json_t *s = token_text(m, l->top[k].token, j->tokens_as_ids);
            if (s && !json_object_get(t, json_string_value(s))) /* keys that decode alike: the likelier one */
                json_object_set_new(t, json_string_value(s), json_real(l->top[k].logprob));
            json_decref(s);
        }
        json_array_append_new(tops, t);
    }
    json_object_set_new(o, "tokens", tokens);
    json_object_set_new(o, "token_logprobs", lps);
    json_object_set_new(o, "top_logprobs", tops);
    json_object_set_new(o, "text_offset", offs);
    return o;
}

json_t *srv_prompt_logprobs_json(const srv_job *j) {
    const pm_model *m = j->ctx->model;
    int k = 1 + j->prompt_top;
    json_t *a = json_array();
    for (int p = 0; a && p < j->n_plps; p++) {
        const pm_logprob *row = j->plps + (size_t)p * (size_t)k;
        if (p == 0) { /* nothing before it */
            json_array_append_new(a, json_null());
            continue;
        }
        json_t *o = json_object();
        for (int q = 0; q < k; q++) {
            if (q > 0 && row[q].rank == 0) break; /* fewer alternatives than asked (a tiny vocabulary) */
            char key[16];
            snprintf(key, sizeof key, "%d", (int)row[q].token);
            if (json_object_get(o, key)) continue; /* the prompt's token among the likeliest */
            json_t *e = json_object();
            json_object_set_new(e, "logprob", json_real(row[q].logprob));
            json_object_set_new(e, "rank", json_integer(row[q].rank));
            json_object_set_new(e, "decoded_token", token_text(m, row[q].token, j->tokens_as_ids));
            json_object_set_new(o, key, e);
        }
        json_array_append_new(a, o);
    }
    return a;
}
