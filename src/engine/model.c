/* model.c — loading a checkpoint directory as it is. Order: config.json (validated), weights
 * (headers validated, mmap'd), every module fetching its tensors with shape checks, then the
 * consumption check (an unknown tensor is an error), then the tokenizer. */
#include "model.h"
#include "nn/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static json_t *load_json(const char *dir, const char *name, int required, pm_err *e) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (access(p, F_OK) != 0) {
        if (required) pm_errf(e, PM_EIO, "%s: missing (the checkpoint directory must hold the official %s)", p, name);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!j) pm_errf(e, PM_EFORMAT, "%s: invalid JSON at line %d, column %d: %s", p, je.line, je.column, je.text);
    else if (!json_is_object(j)) {
        pm_errf(e, PM_EFORMAT, "%s: top level is not a JSON object", p);
        json_decref(j);
        j = NULL;
    }
    return j;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_frontend(pm_model *m, const json_t *pre, pm_err *e) {
    m->dynamic_hd = 36;
    m->audio_compression = 8;
    m->audio_downsample = 1;
    m->crop_size = 448;
    if (pre) {
        if (json_object_get(pre, "dynamic_hd") && pm_json_int(pre, "dynamic_hd", 1, 4096, &m->dynamic_hd, "preprocessor_config.json", e))
            return e->code;
        if (json_object_get(pre, "audio_compression_rate") &&
            pm_json_int(pre, "audio_compression_rate", 1, 64, &m->audio_compression, "preprocessor_config.json", e))
            return e->code;
        if (json_object_get(pre, "audio_downsample_rate") &&
            pm_json_int(pre, "audio_downsample_rate", 1, 64, &m->audio_downsample, "preprocessor_config.json", e))
            return e->code;
    }
    json_t *il = json_object_get(json_object_get(m->config, "embd_layer"), "image_embd_layer");
    if (json_is_object(il) && json_object_get(il, "crop_size") &&
        pm_json_int(il, "crop_size", 14, 4096, &m->crop_size, "config.json: embd_layer.image_embd_layer", e))
        return e->code;
    return PM_OK;
}

int pm_model_open(pm_model **out, const char *dir, const pm_load_options *opts, pm_err *e) {
    *out = NULL;
    double t0 = now_s();
    pm_model *m = pm_calloc(1, sizeof *m, e);
    if (!m) return e->code;
    m->dir = strdup(dir);
    json_t *gen = NULL, *pre = NULL;
    m->config = load_json(dir, "config.json", 1, e);
    if (!e->code) gen = load_json(dir, "generation_config.json", 0, e);
    if (!e->code) pre = load_json(dir, "preprocessor_config.json", 0, e);
    pm_llm_config lc;
    if (!e->code && pm_llm_config_parse(m->config, gen, &lc, e)) pm_err_ctx(e, "%s/", dir);
    if (!e->code) parse_frontend(m, pre, e);
    json_t *ap = m->config ? json_object_get(m->config, "audio_processor") : NULL;
    if (!e->code && pm_conformer_config_parse(ap, &m->conf_cfg, e)) pm_err_ctx(e, "%s/", dir);
    if (!e->code) pm_weights_open(&m->w, dir, e);
    if (!e->code && opts && opts->compute_bf16 && pm_kern_have_avx512bf16()) /* before anything is prepacked */
        m->compute_bf16 = pm_weights_mark_bf16_dot(m->w) > 0;
    if (!e->code && opts && opts->recache) pm_weights_recache(m->w, 1, &m->recache_bytes, &m->recache_huge_bytes, e); /* before the lock */
    if (!e->code && opts && opts->mlock) pm_weights_lock(m->w, e); /* before anything is released */
    if (!e->code) pm_llm_load(&m->llm, m->w, &lc, e);
    if (!e->code) pm_conformer_load(&m->conformer, m->w, &m->conf_cfg, e);
    if (!e->code) pm_audio_proj_load(&m->audio_proj, m->w, pm_conformer_dim(m->conformer), lc.hidden, e);
    if (!e->code) pm_image_embed_load(&m->image, m->w, m->config, lc.hidden, e);
    if (!e->code) pm_weights_check_consumed(m->w, e);
    if (e->code == PM_EFORMAT && !strstr(e->msg, dir)) pm_err_ctx(e, "%s: ", dir);
    if (!e->code) pm_tok_load(&m->tok, dir, e);
    m->weights = opts ? opts->weights : PM_WEIGHTS_BF16;
    if (!e->code && m->weights == PM_WEIGHTS_Q8) pm_llm_quantize(&m->llm, m->w, &m->q8_bytes, e);
    if (!e->code) pm_weights_unmap_resident(m->w); /* the inference faults back in what it reads */
    json_decref(gen);
    json_decref(pre);
    if (e->code) {
        pm_model_free(m);
        return e->code;
    }
    m->load_seconds = now_s() - t0;
    *out = m;
    return PM_OK;
}

int pm_model_load_opts(pm_model **out, const char *dir, const pm_load_options *opts, char *err, size_t errlen) {
    pm_err e = {0};
    int rc = PM_OK;
    if (opts && opts->weights != PM_WEIGHTS_BF16 && opts->weights != PM_WEIGHTS_Q8) {
        *out = NULL;
        rc = pm_errf(&e, PM_EINVAL, "unknown weight format %d", (int)opts->weights);
    } else rc = pm_model_open(out, dir, opts, &e);
    if (rc && err && errlen) snprintf(err, errlen, "%s", e.msg);
    return rc;
}

int pm_model_load(pm_model **out, const char *dir, char *err, size_t errlen) { return pm_model_load_opts(out, dir, NULL, err, errlen); }

int pm_weight_format_parse(const char *s, pm_weight_format *out) {
    if (s && !strcmp(s, "bf16")) *out = PM_WEIGHTS_BF16;
    else if (s && !strcmp(s, "q8")) *out = PM_WEIGHTS_Q8;
    else return -1;
    return 0;
}

pm_weight_format pm_model_weights(const pm_model *m) { return m->weights; }

const char *pm_weight_format_name(pm_weight_format f) { return f == PM_WEIGHTS_Q8 ? "q8" : "bf16"; }

void pm_model_free(pm_model *m) {
    if (!m) return;
    pm_tok_free(m->tok);
    pm_image_embed_free(m->image);
    pm_audio_proj_free(m->audio_proj);
    pm_conformer_free(m->conformer);
    pm_llm_free(&m->llm);
    pm_weights_close(m->w);
    json_decref(m->config);
    free(m->dir);
    free(m);
}

const char *pm_model_token_bytes(const pm_model *m, int32_t id, size_t *len) { return pm_tok_token_bytes(m->tok, id, len); }

int32_t pm_model_token_id(const pm_model *m, const char *text) { return pm_tok_id(m->tok, text); }

int pm_model_tokenize(const pm_model *m, const char *text, size_t len, int32_t **ids, size_t *n, char *err, size_t errlen) {
    pm_err e = {0};
    *ids = NULL;
    *n = 0;
    if (!text && len) pm_errf(&e, PM_EINVAL, "tokenize: no text");
    else pm_tok_encode(m->tok, text ? text : "", len, 1, ids, n, &e);
    if (e.code && err && errlen) snprintf(err, errlen, "%s", e.msg);
    return e.code;
}

void pm_model_get_info(const pm_model *m, pm_model_info *info) {
    memset(info, 0, sizeof *info);
    const pm_llm_config *c = &m->llm.c;
    info->vocab = c->vocab;
    info->hidden = c->hidden;
    info->n_layers = c->n_layers;
    info->n_heads = c->n_heads;
    info->n_kv_heads = c->n_kv_heads;
    info->head_dim = c->head_dim;
    info->intermediate = c->intermediate;
    info->max_position = c->max_pos;
    info->original_max_position = c->orig_max_pos;
    info->speech_lora_r = c->lora_r[PM_ADAPTER_SPEECH];
    info->vision_lora_r = c->lora_r[PM_ADAPTER_VISION];
    info->audio_dim = m->conf_cfg.attention_dim;
    info->audio_blocks = m->conf_cfg.num_blocks;
    pm_image_embed_dims(m->image, &info->vision_dim, &info->vision_layers);
    info->n_tensors = pm_weights_count(m->w);
    info->n_shards = pm_weights_num_shards(m->w);
    info->weight_bytes = pm_weights_total_bytes(m->w);
    info->load_seconds = m->load_seconds;
    info->weights = m->weights;
    info->q8_bytes = m->q8_bytes;
    info->recache_bytes = m->recache_bytes;
    info->recache_huge_bytes = m->recache_huge_bytes;
    info->compute_bf16 = m->compute_bf16;
}

void pm_image_embed_dims(const pm_image_embed *im, int *dim, int *layers) {
    const pm_siglip_config *c = pm_siglip_get_config(pm_image_embed_siglip(im));
    *dim = c->hidden;
    *layers = c->layers;
}
