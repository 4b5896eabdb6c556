/* llm_config.c — see llm_config.h. Field names follow the official config.json. */
#include "llm_config.h"

#include <math.h>
#include <string.h>

int pm_json_int(const json_t *obj, const char *key, long long lo, long long hi, int *out, const char *where, pm_err *e) {
    json_t *v = json_object_get(obj, key);
    if (!v) return pm_errf(e, PM_EFORMAT, "%s: missing field \"%s\"", where, key);
    if (!json_is_integer(v)) return pm_errf(e, PM_EFORMAT, "%s: field \"%s\" must be an integer", where, key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return pm_errf(e, PM_EFORMAT, "%s: field \"%s\" = %lld is out of range [%lld, %lld]", where, key, x, lo, hi);
    *out = (int)x;
    return PM_OK;
}

int pm_json_num(const json_t *obj, const char *key, double lo, double hi, double *out, const char *where, pm_err *e) {
    json_t *v = json_object_get(obj, key);
    if (!v) return pm_errf(e, PM_EFORMAT, "%s: missing field \"%s\"", where, key);
    if (!json_is_number(v)) return pm_errf(e, PM_EFORMAT, "%s: field \"%s\" must be a number", where, key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return pm_errf(e, PM_EFORMAT, "%s: field \"%s\" = %g is out of range [%g, %g]", where, key, x, lo, hi);
    *out = x;
    return PM_OK;
}

static int parse_factors(const json_t *rs, const char *key, float *dst, int n, pm_err *e) {
    json_t *a = json_object_get(rs, key);
    if (!json_is_array(a)) return pm_errf(e, PM_EFORMAT, "config.json: rope_scaling.%s must be an array", key);
    if ((int)json_array_size(a) != n)
        return pm_errf(e, PM_EFORMAT, "config.json: rope_scaling.%s has %zu values, rotary dims imply %d", key, json_array_size(a), n);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        float f = json_is_number(v) ? (float)json_number_value(v) : 0.0f;
        if (!(f > 0.0f) || !isfinite(f)) /* also catches 1e300, which is finite in double but not in float */
            return pm_errf(e, PM_EFORMAT, "config.json: rope_scaling.%s[%d] must be a positive finite number", key, i);
        dst[i] = f;
    }
    return PM_OK;
}

static int parse_lora(const json_t *root, const char *key, int *r, float *alpha, pm_err *e) {
    json_t *l = json_object_get(root, key);
    char where[64];
    snprintf(where, sizeof where, "config.json: %s", key);
    if (!json_is_object(l)) return pm_errf(e, PM_EFORMAT, "%s: missing object (the checkpoint's LoRA adapter settings)", where);
    double a;
    int rc = pm_json_int(l, "r", 1, 1 << 16, r, where, e);
    if (!rc) rc = pm_json_num(l, "lora_alpha", 1e-6, 1e9, &a, where, e);
    if (!rc) *alpha = (float)a;
    return rc;
}

int pm_llm_config_parse(const json_t *root, const json_t *gen, pm_llm_config *c, pm_err *e) {
    memset(c, 0, sizeof *c);
    const char *w = "config.json";
    json_t *mt = json_object_get(root, "model_type");
    if (!json_is_string(mt) || strcmp(json_string_value(mt), "phi4mm"))
        return pm_errf(e, PM_EUNSUPPORTED, "config.json: model_type is %s%s%s, expected \"phi4mm\" (microsoft/Phi-4-multimodal-instruct)",
                       json_is_string(mt) ? "\"" : "", json_is_string(mt) ? json_string_value(mt) : "missing", json_is_string(mt) ? "\"" : "");
    int rc = PM_OK;
    double d;
    if ((rc = pm_json_int(root, "vocab_size", 1, 1 << 22, &c->vocab, w, e))) return rc;
    if ((rc = pm_json_int(root, "hidden_size", 1, 1 << 16, &c->hidden, w, e))) return rc;
    if ((rc = pm_json_int(root, "num_hidden_layers", 1, 1024, &c->n_layers, w, e))) return rc;
    if ((rc = pm_json_int(root, "num_attention_heads", 1, 1024, &c->n_heads, w, e))) return rc;
    if ((rc = pm_json_int(root, "num_key_value_heads", 1, 1024, &c->n_kv_heads, w, e))) return rc;
    if ((rc = pm_json_int(root, "intermediate_size", 1, 1 << 20, &c->intermediate, w, e))) return rc;
    if ((rc = pm_json_int(root, "max_position_embeddings", 1, 1 << 24, &c->max_pos, w, e))) return rc;
    /* >= 2: the LongRoPE scale divides by log(original_max_position_embeddings) */
    if ((rc = pm_json_int(root, "original_max_position_embeddings", 2, 1 << 24, &c->orig_max_pos, w, e))) return rc;
    if ((rc = pm_json_num(root, "rms_norm_eps", 0, 1, &d, w, e))) return rc;
    c->rms_eps = (float)d;
    if ((rc = pm_json_num(root, "rope_theta", 1, 1e12, &d, w, e))) return rc;
    c->rope_theta = (float)d;
    if (c->hidden % c->n_heads) return pm_errf(e, PM_EFORMAT, "config.json: hidden_size %d is not divisible by num_attention_heads %d", c->hidden, c->n_heads);
    if (c->n_heads % c->n_kv_heads)
        return pm_errf(e, PM_EFORMAT, "config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d", c->n_heads, c->n_kv_heads);
    c->head_dim = c->hidden / c->n_heads;
    double prf = 1.0;
    if (json_object_get(root, "partial_rotary_factor") && (rc = pm_json_num(root, "partial_rotary_factor", 0.0, 1.0, &prf, w, e))) return rc;
    c->rot_dims = (int)(c->head_dim * prf);
    if (c->rot_dims <= 0 || c->rot_dims % 2) return pm_errf(e, PM_EFORMAT, "config.json: rotary dims %d (head_dim x partial_rotary_factor) must be even and > 0", c->rot_dims);
    c->n_factors = c->rot_dims / 2;
    if (c->n_factors > PM_MAX_ROPE_FACTORS) return pm_errf(e, PM_EUNSUPPORTED, "config.json: %d rotary factors exceed the supported %d", c->n_factors, PM_MAX_ROPE_FACTORS);
    json_t *rs = json_object_get(root, "rope_scaling");
    if (json_is_null(rs) || !rs) {
        for (int i = 0; i < c->n_factors; i++) c->short_factor[i] = c->long_factor[i] = 1.0f;
    } else {
        json_t *ty = json_object_get(rs, "type");
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "longrope"))
            return pm_errf(e, PM_EUNSUPPORTED, "config.json: rope_scaling.type must be \"longrope\"");
        if ((rc = parse_factors(rs, "short_factor", c->short_factor, c->n_factors, e))) return rc;
        if ((rc = parse_factors(rs, "long_factor", c->long_factor, c->n_factors, e))) return rc;
    }
    double scale = (double)c->max_pos / c->orig_max_pos;
    c->rope_scale = scale <= 1.0 ? 1.0f : (float)sqrt(1.0 + log(scale) / log((double)c->orig_max_pos));
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && !json_is_true(tie)) return pm_errf(e, PM_EUNSUPPORTED, "config.json: tie_word_embeddings must be true (lm_head is tied)");
    json_t *act = json_object_get(root, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu")))
        return pm_errf(e, PM_EUNSUPPORTED, "config.json: hidden_act must be \"silu\"");
    if ((rc = parse_lora(root, "speech_lora", &c->lora_r[PM_ADAPTER_SPEECH], &c->lora_alpha[PM_ADAPTER_SPEECH], e))) return rc;
    if ((rc = parse_lora(root, "vision_lora", &c->lora_r[PM_ADAPTER_VISION], &c->lora_alpha[PM_ADAPTER_VISION], e))) return rc;
    /* Stop ids: generation_config.json's eos_token_id (int or list), else the official pair. */
    json_t *eos = gen ? json_object_get(gen, "eos_token_id") : NULL;
    if (json_is_integer(eos)) {
        if (json_integer_value(eos) < 0 || json_integer_value(eos) >= c->vocab)
            return pm_errf(e, PM_EFORMAT, "generation_config.json: eos_token_id %lld is not a token id below %d",
                           (long long)json_integer_value(eos), c->vocab);
        c->eos_ids[c->n_eos++] = (int)json_integer_value(eos);
    } else if (json_is_array(eos)) {
        for (size_t i = 0; i < json_array_size(eos) && c->n_eos < PM_MAX_EOS; i++) {
            json_t *v = json_array_get(eos, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= c->vocab)
                return pm_errf(e, PM_EFORMAT, "generation_config.json: eos_token_id[%zu] is not a token id below %d", i, c->vocab);
            c->eos_ids[c->n_eos++] = (int)json_integer_value(v);
        }
    }
    if (c->n_eos == 0) {
        c->eos_ids[0] = 200020;
        c->eos_ids[1] = 199999;
        c->n_eos = 2;
    }
    return PM_OK;
}
