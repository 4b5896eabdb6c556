/* logprobs.c — see logprobs.h. */
#include "logprobs.h"

#include "json_util.h"

static json_t *token_text(const pm_model *m, int32_t id) {
    size_t len = 0;
    const char *b = pm_model_token_bytes(m, id, &len);
    return srv_json_text(b ? b : "", len);
}

static json_t *token_bytes(const pm_model *m, int32_t id) {
    size_t len = 0;
    const unsigned char *b = (const unsigned char *)pm_model_token_bytes(m, id, &len);
    json_t *a = json_array();
    for (size_t i = 0; a && i < len; i++) json_array_append_new(a, json_integer(b[i]));
    return a;
}

static json_t *chat_entry(const pm_model *m, pm_logprob p) {
    json_t *o = json_object();
    json_object_set_new(o, "token", token_text(m, p.token));
    json_object_set_new(o, "logprob", json_real(p.logprob));
    json_object_set_new(o, "bytes", token_bytes(m, p.token));
    return o;
}

json_t *srv_logprobs_json(const srv_job *j, int from, int to) {
    const pm_model *m = j->ctx->model;
    json_t *o = json_object();
    if (j->kind != SRV_JOB_COMPLETION) {
        json_t *content = json_array();
        for (int i = from; i < to; i++) {
            const srv_lp *l = &j->lps[i];
            json_t *e = chat_entry(m, l->chosen), *top = json_array();
            for (int k = 0; k < l->n_top; k++) json_array_append_new(top, chat_entry(m, l->top[k]));
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
        json_array_append_new(tokens, token_text(m, l->chosen.token));
        json_array_append_new(offs, json_integer((json_int_t)l->offset));
        if (l->unscored) { /* the echoed prompt's first token: nothing before it */
            json_array_append_new(lps, json_null());
            json_array_append_new(tops, json_null());
            continue;
        }
        json_array_append_new(lps, json_real(l->chosen.logprob));
        json_t *t = json_object();
        for (int k = 0; k < l->n_top; k++) {
            json_t *s = token_text(m, l->top[k].token);
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
