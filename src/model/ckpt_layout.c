/* ckpt_layout.c — see ckpt_layout.h. The shapes follow the official module constructors:
 *  - decoder: qkv [(nh + 2 nkv) hd, H], o [H, nh hd], gate_up [2 I, H], down [H, I]; LoRA A [r, in],
 *    B [out, r] on those four of every layer;
 *  - Conformer block (ConformerEncoderLayer): FF = LN, GLU Linear(D, 2U), Linear(U, D); MHSA
 *    q [A, D], k/v [A/g, D], out [D, A/g]; ConvModule = LN, GLU pointwise Conv1d(D, 2E, ke) with b1/b2
 *    [1, E, 1], depthwise Conv1d(D, D m, k, groups D), pointwise Conv1d(D m, S, 1), ext pointwise
 *    Conv1d(D, E, ke), plus the Linear adapters ln1/ln2 only when those widths differ from D;
 *  - NeMo dw_striding: Conv2d(1, C, 3) then per extra stride depthwise Conv2d(C, C, 3, groups C) and
 *    Conv2d(C, C, 1) at Sequential indices 2+3i / 3+3i; `out` = Linear(C * F', D) where F' is the
 *    feature axis after log2(time_reduction) stride-2 convolutions;
 *  - SigLIP (NaViT): patch Conv2d(3, Dv, p), (image/p)^2 positions, q/k/v/out + LN1/LN2 + fc1/fc2 per
 *    layer, post_layernorm, attention-pooling head (probe, packed in_proj, out_proj, LN, MLP);
 *  - HD separators glb_GN [1, 1, Dv r^2], sub_GN [1, 1, 1, Dv r^2] (r = 1 with avg_pool_2d
 *    compression, else 2), projections MLP Linear(in, H), Linear(H, H). */
#include "ckpt_layout.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct builder {
    pm_ckpt_entry *v;
    int n, cap;
    pm_err *e;
} builder;

/* Appends one entry; `ndim` dims from `shape`, name from printf format. */
PM_PRINTF(4, 5)
static void add(builder *b, int ndim, const int64_t *shape, const char *fmt, ...) {
    if (b->e->code) return;
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 256;
        pm_ckpt_entry *v = realloc(b->v, sizeof *v * (size_t)cap);
        if (!v) {
            pm_errf(b->e, PM_ENOMEM, "checkpoint layout: out of memory");
            return;
        }
        b->v = v;
        b->cap = cap;
    }
    pm_ckpt_entry *en = &b->v[b->n];
    memset(en, 0, sizeof *en);
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(en->name, sizeof en->name, fmt, ap);
    va_end(ap);
    PM_ASSERT(len > 0 && len < PM_CKPT_NAME_MAX);
    PM_ASSERT(ndim >= 1 && ndim <= PM_MAX_DIMS);
    en->ndim = ndim;
    for (int i = 0; i < ndim; i++) en->shape[i] = shape[i];
    b->n++;
}

#define S1(a) 1, (const int64_t[]){(a)}
#define S2(a, b) 2, (const int64_t[]){(a), (b)}
#define S3(a, b, c) 3, (const int64_t[]){(a), (b), (c)}
#define S4(a, b, c, d) 4, (const int64_t[]){(a), (b), (c), (d)}

/* ---- config access ------------------------------------------------------------------------ */

/* Reads integer `key` of `obj` (described as `where` in messages). Missing: *out = dflt, or an
 * error when dflt < 0 means "required". Must be >= min. Accepts integral JSON reals (1024.0). */
static int get_int(const json_t *obj, const char *where, const char *key, int64_t dflt, int64_t min, int64_t *out,
                   pm_err *e) {
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) {
        if (dflt < 0) return pm_errf(e, PM_EINVAL, "config.json: %s%s is missing", where, key);
        *out = dflt;
        return PM_OK;
    }
    int64_t x;
    if (json_is_integer(v)) x = (int64_t)json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == (double)(int64_t)json_real_value(v)) x = (int64_t)json_real_value(v);
    else return pm_errf(e, PM_EINVAL, "config.json: %s%s is not an integer", where, key);
    if (x < min || x > ((int64_t)1 << 40))
        return pm_errf(e, PM_EINVAL, "config.json: %s%s = %lld is out of range (must be >= %lld)", where, key, (long long)x,
                       (long long)min);
    *out = x;
    return PM_OK;
}

/* Reads boolean `key` (default dflt when missing). */
static int get_bool(const json_t *obj, const char *where, const char *key, int dflt, int *out, pm_err *e) {
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) {
        *out = dflt;
        return PM_OK;
    }
    if (!json_is_boolean(v)) return pm_errf(e, PM_EINVAL, "config.json: %s%s is not a boolean", where, key);
    *out = json_is_true(v);
    return PM_OK;
}

/* Reads string `key` (dflt when missing; dflt NULL means required). */
static int get_str(const json_t *obj, const char *where, const char *key, const char *dflt, const char **out, pm_err *e) {
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) {
        if (!dflt) return pm_errf(e, PM_EINVAL, "config.json: %s%s is missing", where, key);
        *out = dflt;
        return PM_OK;
    }
    if (!json_is_string(v)) return pm_errf(e, PM_EINVAL, "config.json: %s%s is not a string", where, key);
    *out = json_string_value(v);
    return PM_OK;
}

/* Returns sub-object `key` of obj, NULL when absent; an error if present but not an object. */
static const json_t *get_obj(const json_t *obj, const char *where, const char *key, int required, pm_err *e) {
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) {
        if (required) pm_errf(e, PM_EINVAL, "config.json: %s%s is missing", where, key);
        return NULL;
    }
    if (!json_is_object(v)) {
        pm_errf(e, PM_EINVAL, "config.json: %s%s is not an object", where, key);
        return NULL;
    }
    return v;
}

int pm_ckpt_siglip_dims(const json_t *config, pm_siglip_dims *d, pm_err *e) {
    /* Real so400m dims: hard-coded in the official get_siglip_vision_model(). */
    *d = (pm_siglip_dims){.hidden = 1152, .intermediate = 4304, .layers = 27, .heads = 16, .patch = 14, .image = 448};
    const json_t *sc = get_obj(config, "", "_oracle_siglip_vision_config", 0, e);
    if (e->code) return e->code;
    if (!sc) return PM_OK;
    const char *w = "_oracle_siglip_vision_config.";
    int rc = get_int(sc, w, "hidden_size", -1, 1, &d->hidden, e);
    if (!rc) rc = get_int(sc, w, "intermediate_size", -1, 1, &d->intermediate, e);
    if (!rc) rc = get_int(sc, w, "num_hidden_layers", -1, 1, &d->layers, e);
    if (!rc) rc = get_int(sc, w, "num_attention_heads", -1, 1, &d->heads, e);
    if (!rc) rc = get_int(sc, w, "patch_size", 14, 1, &d->patch, e);
    if (!rc) rc = get_int(sc, w, "image_size", 448, 1, &d->image, e);
    if (rc) return rc;
    if (d->hidden % d->heads) return pm_errf(e, PM_EINVAL, "config.json: %shidden_size %lld is not a multiple of num_attention_heads %lld", w, (long long)d->hidden, (long long)d->heads);
    if (d->image % d->patch) return pm_errf(e, PM_EINVAL, "config.json: %simage_size %lld is not a multiple of patch_size %lld", w, (long long)d->image, (long long)d->patch);
    return PM_OK;
}

/* ---- decoder ------------------------------------------------------------------------------- */

typedef struct llm_dims {
    int64_t H, I, nh, nkv, hd, L, V;
    int64_t r_speech, r_vision;   /* 0: adapter absent */
    int tied;
} llm_dims;

static int read_llm(const json_t *c, llm_dims *d, pm_err *e) {
    int rc = get_int(c, "", "hidden_size", -1, 1, &d->H, e);
    if (!rc) rc = get_int(c, "", "intermediate_size", -1, 1, &d->I, e);
    if (!rc) rc = get_int(c, "", "num_attention_heads", -1, 1, &d->nh, e);
    if (!rc) rc = get_int(c, "", "num_key_value_heads", d->nh, 1, &d->nkv, e);
    if (!rc) rc = get_int(c, "", "num_hidden_layers", -1, 1, &d->L, e);
    if (!rc) rc = get_int(c, "", "vocab_size", -1, 1, &d->V, e);
    if (!rc) rc = get_bool(c, "", "tie_word_embeddings", 0, &d->tied, e);
    if (rc) return rc;
    if (d->nh % d->nkv)
        return pm_errf(e, PM_EINVAL, "config.json: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                       (long long)d->nh, (long long)d->nkv);
    if (json_object_get(c, "head_dim")) {
        if ((rc = get_int(c, "", "head_dim", -1, 1, &d->hd, e))) return rc;
    } else {
        if (d->H % d->nh)
            return pm_errf(e, PM_EINVAL, "config.json: hidden_size %lld is not a multiple of num_attention_heads %lld",
                           (long long)d->H, (long long)d->nh);
        d->hd = d->H / d->nh;
    }
    d->r_speech = d->r_vision = 0;
    const json_t *sl = get_obj(c, "", "speech_lora", 0, e);
    const json_t *vl = get_obj(c, "", "vision_lora", 0, e);
    if (e->code) return e->code;
    if (sl && (rc = get_int(sl, "speech_lora.", "r", -1, 1, &d->r_speech, e))) return rc;
    if (vl && (rc = get_int(vl, "vision_lora.", "r", -1, 1, &d->r_vision, e))) return rc;
    return PM_OK;
}

/* One LoRA-wrapped linear: base_layer + lora_A/B for each adapter present. */
static void add_lora_linear(builder *b, const llm_dims *d, int layer, const char *mod, int64_t out, int64_t in) {
    add(b, S2(out, in), "model.layers.%d.%s.base_layer.weight", layer, mod);
    const char *names[2] = {"speech", "vision"};
    int64_t r[2] = {d->r_speech, d->r_vision};
    for (int a = 0; a < 2; a++) {
        if (!r[a]) continue;
        add(b, S2(r[a], in), "model.layers.%d.%s.lora_A.%s.weight", layer, mod, names[a]);
        add(b, S2(out, r[a]), "model.layers.%d.%s.lora_B.%s.weight", layer, mod, names[a]);
    }
}

static void add_llm_layers(builder *b, const llm_dims *d) {
    for (int l = 0; l < (int)d->L; l++) {
        add(b, S1(d->H), "model.layers.%d.input_layernorm.weight", l);
        add_lora_linear(b, d, l, "self_attn.qkv_proj", (d->nh + 2 * d->nkv) * d->hd, d->H);
        add_lora_linear(b, d, l, "self_attn.o_proj", d->H, d->nh * d->hd);
        add(b, S1(d->H), "model.layers.%d.post_attention_layernorm.weight", l);
        add_lora_linear(b, d, l, "mlp.gate_up_proj", 2 * d->I, d->H);
        add_lora_linear(b, d, l, "mlp.down_proj", d->H, d->I);
    }
}

/* ---- vision -------------------------------------------------------------------------------- */

static int add_vision(builder *b, const json_t *c, int64_t H, pm_err *e) {
    pm_siglip_dims s;
    int rc = pm_ckpt_siglip_dims(c, &s, e);
    if (rc) return rc;
    const json_t *embd = get_obj(c, "", "embd_layer", 1, e);
    const json_t *img = embd ? get_obj(embd, "embd_layer.", "image_embd_layer", 1, e) : NULL;
    if (e->code) return e->code;
    const char *w = "embd_layer.image_embd_layer.", *proj, *comp;
    int hd, sep;
    if ((rc = get_str(img, w, "projection_cls", "linear", &proj, e))) return rc;
    if ((rc = get_bool(img, w, "use_hd_transform", 0, &hd, e))) return rc;
    if ((rc = get_bool(img, w, "with_learnable_separator", 0, &sep, e))) return rc;
    const json_t *cv = json_object_get(img, "image_token_compression_cls");
    comp = cv && json_is_string(cv) ? json_string_value(cv) : NULL;
    if (cv && !json_is_null(cv) && !json_is_string(cv))
        return pm_errf(e, PM_EINVAL, "config.json: %simage_token_compression_cls is not a string", w);
    int64_t red;
    if (!comp) red = 2;
    else if (!strcmp(comp, "avg_pool_2d")) red = 1;
    else return pm_errf(e, PM_EUNSUPPORTED, "config.json: %simage_token_compression_cls '%s' is not supported", w, comp);
    if (hd != sep) return pm_errf(e, PM_EINVAL, "config.json: %suse_hd_transform and with_learnable_separator differ", w);
    if (strcmp(proj, "mlp") || !hd)
        return pm_errf(e, PM_EUNSUPPORTED, "config.json: %sprojection_cls '%s' without use_hd_transform is not supported (phi4mm needs the HD MLP projection)", w, proj);

    const char *p = "model.embed_tokens_extend.image_embed";
    const int64_t Dv = s.hidden, Iv = s.intermediate, np = (s.image / s.patch) * (s.image / s.patch);
    add(b, S3(1, 1, Dv * red * red), "%s.glb_GN", p);
    add(b, S4(1, 1, 1, Dv * red * red), "%s.sub_GN", p);
    add(b, S4(Dv, 3, s.patch, s.patch), "%s.img_processor.embeddings.patch_embedding.weight", p);
    add(b, S1(Dv), "%s.img_processor.embeddings.patch_embedding.bias", p);
    add(b, S2(np, Dv), "%s.img_processor.embeddings.position_embedding.weight", p);
    for (int l = 0; l < (int)s.layers; l++) {
        const char *lp = "img_processor.encoder.layers";
        static const char *const proj4[4] = {"k_proj", "v_proj", "q_proj", "out_proj"};
        for (int j = 0; j < 4; j++) {
            add(b, S2(Dv, Dv), "%s.%s.%d.self_attn.%s.weight", p, lp, l, proj4[j]);
            add(b, S1(Dv), "%s.%s.%d.self_attn.%s.bias", p, lp, l, proj4[j]);
        }
        add(b, S1(Dv), "%s.%s.%d.layer_norm1.weight", p, lp, l);
        add(b, S1(Dv), "%s.%s.%d.layer_norm1.bias", p, lp, l);
        add(b, S2(Iv, Dv), "%s.%s.%d.mlp.fc1.weight", p, lp, l);
        add(b, S1(Iv), "%s.%s.%d.mlp.fc1.bias", p, lp, l);
        add(b, S2(Dv, Iv), "%s.%s.%d.mlp.fc2.weight", p, lp, l);
        add(b, S1(Dv), "%s.%s.%d.mlp.fc2.bias", p, lp, l);
        add(b, S1(Dv), "%s.%s.%d.layer_norm2.weight", p, lp, l);
        add(b, S1(Dv), "%s.%s.%d.layer_norm2.bias", p, lp, l);
    }
    add(b, S1(Dv), "%s.img_processor.post_layernorm.weight", p);
    add(b, S1(Dv), "%s.img_processor.post_layernorm.bias", p);
    add(b, S3(1, 1, Dv), "%s.img_processor.head.probe", p);
    add(b, S2(3 * Dv, Dv), "%s.img_processor.head.attention.in_proj_weight", p);
    add(b, S1(3 * Dv), "%s.img_processor.head.attention.in_proj_bias", p);
    add(b, S2(Dv, Dv), "%s.img_processor.head.attention.out_proj.weight", p);
    add(b, S1(Dv), "%s.img_processor.head.attention.out_proj.bias", p);
    add(b, S1(Dv), "%s.img_processor.head.layernorm.weight", p);
    add(b, S1(Dv), "%s.img_processor.head.layernorm.bias", p);
    add(b, S2(Iv, Dv), "%s.img_processor.head.mlp.fc1.weight", p);
    add(b, S1(Iv), "%s.img_processor.head.mlp.fc1.bias", p);
    add(b, S2(Dv, Iv), "%s.img_processor.head.mlp.fc2.weight", p);
    add(b, S1(Dv), "%s.img_processor.head.mlp.fc2.bias", p);
    add(b, S2(H, Dv * red * red), "%s.img_projection.0.weight", p);
    add(b, S1(H), "%s.img_projection.0.bias", p);
    add(b, S2(H, H), "%s.img_projection.2.weight", p);
    add(b, S1(H), "%s.img_projection.2.bias", p);
    return e->code;
}

/* ---- audio --------------------------------------------------------------------------------- */

typedef struct conformer_dims {
    int64_t D, heads, U, blocks, n_in, n_norm, C, tr, k, ke, E, S, dm, maxdist, group;
    int bias_in_glu, causal_sub, symmetric;
} conformer_dims;

static int read_conformer(const json_t *c, conformer_dims *d, pm_err *e) {
    const json_t *ap = get_obj(c, "", "audio_processor", 1, e);
    if (e->code) return e->code;
    const char *name;
    int rc = get_str(ap, "audio_processor.", "name", NULL, &name, e);
    if (rc) return rc;
    if (strcmp(name, "cascades"))
        return pm_errf(e, PM_EUNSUPPORTED, "config.json: audio_processor.name '%s' is not supported (only \"cascades\")", name);
    const json_t *ac = get_obj(ap, "audio_processor.", "config", 1, e);
    if (e->code) return e->code;
    const char *w = "audio_processor.config.";
    const char *input_layer, *sub = "dw_striding", *rtype;
    int bn, lg;
    rc = get_int(ac, w, "input_size", -1, 1, &d->n_in, e);
    if (!rc) rc = get_int(ac, w, "attention_dim", 256, 1, &d->D, e);
    if (!rc) rc = get_int(ac, w, "attention_heads", 4, 1, &d->heads, e);
    if (!rc) rc = get_int(ac, w, "linear_units", 2048, 1, &d->U, e);
    if (!rc) rc = get_int(ac, w, "num_blocks", 6, 0, &d->blocks, e);
    if (!rc) rc = get_int(ac, w, "time_reduction", 4, 2, &d->tr, e);
    if (!rc) rc = get_int(ac, w, "kernel_size", 3, 1, &d->k, e);
    if (!rc) rc = get_int(ac, w, "ext_pw_kernel_size", 1, 1, &d->ke, e);
    if (!rc) rc = get_int(ac, w, "ext_pw_out_channel", 0, 0, &d->E, e);
    if (!rc) rc = get_int(ac, w, "depthwise_seperable_out_channel", 256, 0, &d->S, e);
    if (!rc) rc = get_int(ac, w, "depthwise_multiplier", 1, 1, &d->dm, e);
    if (!rc) rc = get_int(ac, w, "attention_group_size", 1, 1, &d->group, e);
    if (!rc) rc = get_bool(ac, w, "bias_in_glu", 1, &d->bias_in_glu, e);
    if (!rc) rc = get_bool(ac, w, "batch_norm", 0, &bn, e);
    if (!rc) rc = get_bool(ac, w, "linear_glu_in_convm", 0, &lg, e);
    if (!rc) rc = get_str(ac, w, "input_layer", "nemo_conv", &input_layer, e);
    if (rc) return rc;
    if (strcmp(input_layer, "nemo_conv"))
        return pm_errf(e, PM_EUNSUPPORTED, "config.json: %sinput_layer '%s' is not supported (only nemo_conv)", w, input_layer);
    if (bn) return pm_errf(e, PM_EUNSUPPORTED, "config.json: %sbatch_norm true is not supported", w);
    if (lg) return pm_errf(e, PM_EUNSUPPORTED, "config.json: %slinear_glu_in_convm true is not supported", w);
    if (d->tr & (d->tr - 1)) return pm_errf(e, PM_EINVAL, "config.json: %stime_reduction %lld is not a power of 2", w, (long long)d->tr);
    if (d->heads % d->group) return pm_errf(e, PM_EINVAL, "config.json: %sattention_group_size does not divide attention_heads", w);
    if (d->D % d->heads) return pm_errf(e, PM_EINVAL, "config.json: %sattention_dim %lld is not a multiple of attention_heads %lld", w, (long long)d->D, (long long)d->heads);

    const json_t *ee = get_obj(ac, w, "encoder_embedding_config", 0, e);
    if (e->code) return e->code;
    if ((rc = get_int(ee, "audio_processor.config.encoder_embedding_config.", "input_size", d->n_in, 1, &d->n_norm, e))) return rc;

    const json_t *nc = get_obj(ac, w, "nemo_conv_settings", 0, e);
    if (e->code) return e->code;
    const char *nw = "audio_processor.config.nemo_conv_settings.";
    if ((rc = get_int(nc, nw, "conv_channels", 256, 1, &d->C, e))) return rc;
    if ((rc = get_str(nc, nw, "subsampling", "dw_striding", &sub, e))) return rc;
    if ((rc = get_bool(nc, nw, "is_causal", 0, &d->causal_sub, e))) return rc;
    if (strcmp(sub, "dw_striding"))
        return pm_errf(e, PM_EUNSUPPORTED, "config.json: %ssubsampling '%s' is not supported (only dw_striding)", nw, sub);

    const json_t *rb = get_obj(ac, w, "relative_attention_bias_args", 1, e);
    if (e->code) return e->code;
    const char *rw = "audio_processor.config.relative_attention_bias_args.";
    if ((rc = get_str(rb, rw, "type", NULL, &rtype, e))) return rc;
    if (strcmp(rtype, "t5")) return pm_errf(e, PM_EUNSUPPORTED, "config.json: %stype '%s' is not supported (only t5)", rw, rtype);
    if ((rc = get_int(rb, rw, "t5_bias_max_distance", 1000, 1, &d->maxdist, e))) return rc;
    if ((rc = get_bool(rb, rw, "t5_bias_symmetric", 0, &d->symmetric, e))) return rc;
    return PM_OK;
}

/* Feature-axis length after the NeMo stride-2, kernel-3 convolutions (floor mode). */
static int64_t nemo_out_len(int64_t len, int causal, int n_strides) {
    int64_t pad = causal ? (3 - 1) + (2 - 1) : 2; /* left + right padding */
    for (int i = 0; i < n_strides; i++) len = (len + pad - 3) / 2 + 1; /* operands >= 0: '/' floors */
    return len;
}

static void add_conformer_block(builder *b, const conformer_dims *d, const char *p, int i) {
    const int64_t D = d->D, U = d->U, A = d->D, Ak = d->D / d->group, E = d->E, S = d->S, Dm = d->D * d->dm;
    const char *ff[2] = {"feed_forward_in", "feed_forward_out"};
    for (int f = 0; f < 2; f++) {
        add(b, S1(D), "%s.encoders.%d.%s.layer_norm.weight", p, i, ff[f]);
        add(b, S1(D), "%s.encoders.%d.%s.layer_norm.bias", p, i, ff[f]);
        add(b, S2(2 * U, D), "%s.encoders.%d.%s.net.0.linear.weight", p, i, ff[f]);
        if (d->bias_in_glu) add(b, S1(2 * U), "%s.encoders.%d.%s.net.0.linear.bias", p, i, ff[f]);
        add(b, S2(D, U), "%s.encoders.%d.%s.net.2.weight", p, i, ff[f]);
        add(b, S1(D), "%s.encoders.%d.%s.net.2.bias", p, i, ff[f]);
    }
    add(b, S2(A, D), "%s.encoders.%d.self_attn.linear_q.weight", p, i);
    add(b, S1(A), "%s.encoders.%d.self_attn.linear_q.bias", p, i);
    add(b, S2(Ak, D), "%s.encoders.%d.self_attn.linear_k.weight", p, i);
    add(b, S1(Ak), "%s.encoders.%d.self_attn.linear_k.bias", p, i);
    add(b, S2(Ak, D), "%s.encoders.%d.self_attn.linear_v.weight", p, i);
    add(b, S1(Ak), "%s.encoders.%d.self_attn.linear_v.bias", p, i);
    add(b, S2(D, Ak), "%s.encoders.%d.self_attn.linear_out.weight", p, i);
    add(b, S1(D), "%s.encoders.%d.self_attn.linear_out.bias", p, i);

    add(b, S1(D), "%s.encoders.%d.conv.layer_norm.weight", p, i);
    add(b, S1(D), "%s.encoders.%d.conv.layer_norm.bias", p, i);
    if (E) {
        add(b, S3(2 * E, D, d->ke), "%s.encoders.%d.conv.glu.ext_pw_conv_1d.weight", p, i);
        add(b, S1(2 * E), "%s.encoders.%d.conv.glu.ext_pw_conv_1d.bias", p, i);
        if (d->bias_in_glu) {
            add(b, S3(1, E, 1), "%s.encoders.%d.conv.glu.b1", p, i);
            add(b, S3(1, E, 1), "%s.encoders.%d.conv.glu.b2", p, i);
        }
        add(b, S3(E, D, d->ke), "%s.encoders.%d.conv.ext_pw_conv_1d.weight", p, i);
        add(b, S1(E), "%s.encoders.%d.conv.ext_pw_conv_1d.bias", p, i);
        if (E != D) {
            add(b, S2(D, E), "%s.encoders.%d.conv.ln1.weight", p, i);
            add(b, S1(D), "%s.encoders.%d.conv.ln1.bias", p, i);
        }
    } else {
        add(b, S1(3), "%s.encoders.%d.conv.pw_conv_simplify_w", p, i);
        add(b, S1(3), "%s.encoders.%d.conv.pw_conv_simplify_b", p, i);
    }
    add(b, S3(Dm, 1, d->k), "%s.encoders.%d.conv.dw_sep_conv_1d.dw_conv.weight", p, i);
    add(b, S1(Dm), "%s.encoders.%d.conv.dw_sep_conv_1d.dw_conv.bias", p, i);
    if (S) {
        add(b, S3(S, Dm, 1), "%s.encoders.%d.conv.dw_sep_conv_1d.pw_conv.weight", p, i);
        add(b, S1(S), "%s.encoders.%d.conv.dw_sep_conv_1d.pw_conv.bias", p, i);
        if (S != D) {
            add(b, S2(D, S), "%s.encoders.%d.conv.ln2.weight", p, i);
            add(b, S1(D), "%s.encoders.%d.conv.ln2.bias", p, i);
        }
    } else if (d->dm != 1) {
        add(b, S2(D, Dm), "%s.encoders.%d.conv.ln2.weight", p, i);
        add(b, S1(D), "%s.encoders.%d.conv.ln2.bias", p, i);
    }
    add(b, S1(D), "%s.encoders.%d.layer_norm_att.weight", p, i);
    add(b, S1(D), "%s.encoders.%d.layer_norm_att.bias", p, i);
    add(b, S1(D), "%s.encoders.%d.layer_norm.weight", p, i);
    add(b, S1(D), "%s.encoders.%d.layer_norm.bias", p, i);
}

static int add_audio(builder *b, const json_t *c, int64_t H, pm_err *e) {
    conformer_dims d;
    int rc = read_conformer(c, &d, e);
    if (rc) return rc;
    const json_t *embd = get_obj(c, "", "embd_layer", 1, e);
    const json_t *aud = embd ? get_obj(embd, "embd_layer.", "audio_embd_layer", 1, e) : NULL;
    if (e->code) return e->code;
    const char *w = "embd_layer.audio_embd_layer.", *proj;
    int64_t ds;
    if ((rc = get_str(aud, w, "projection_cls", "linear", &proj, e))) return rc;
    if ((rc = get_int(aud, w, "downsample_rate", 1, 1, &ds, e))) return rc;
    if (strcmp(proj, "mlp"))
        return pm_errf(e, PM_EUNSUPPORTED, "config.json: %sprojection_cls '%s' is not supported (only mlp)", w, proj);

    const char *p = "model.embed_tokens_extend.audio_embed.encoder";
    int n_strides = 0;
    for (int64_t t = d.tr; t > 1; t >>= 1) n_strides++;
    const int64_t C = d.C, F = nemo_out_len(d.n_in, d.causal_sub, n_strides);
    add(b, S1(d.n_norm), "%s.encoder_embedding.global_mean", p);
    add(b, S1(d.n_norm), "%s.encoder_embedding.global_invstd", p);
    add(b, S4(C, 1, 3, 3), "%s.embed.conv.0.weight", p);
    add(b, S1(C), "%s.embed.conv.0.bias", p);
    for (int s = 0; s < n_strides - 1; s++) {
        add(b, S4(C, 1, 3, 3), "%s.embed.conv.%d.weight", p, 2 + 3 * s);
        add(b, S1(C), "%s.embed.conv.%d.bias", p, 2 + 3 * s);
        add(b, S4(C, C, 1, 1), "%s.embed.conv.%d.weight", p, 3 + 3 * s);
        add(b, S1(C), "%s.embed.conv.%d.bias", p, 3 + 3 * s);
    }
    add(b, S2(d.D, C * F), "%s.embed.out.weight", p);
    add(b, S1(d.D), "%s.embed.out.bias", p);
    add(b, S2((d.symmetric ? 1 : 2) * d.maxdist, d.heads / d.group), "%s.relative_attention_bias_layer.bias_values.weight", p);
    for (int i = 0; i < (int)d.blocks; i++) add_conformer_block(b, &d, p, i);

    const char *pp = "model.embed_tokens_extend.audio_embed.audio_projection";
    const char *br[2] = {"speech", "vision"};
    for (int j = 0; j < 2; j++) {
        add(b, S2(H, d.D * ds), "%s.%s.0.weight", pp, br[j]);
        add(b, S1(H), "%s.%s.0.bias", pp, br[j]);
        add(b, S2(H, H), "%s.%s.2.weight", pp, br[j]);
        add(b, S1(H), "%s.%s.2.bias", pp, br[j]);
    }
    return e->code;
}

/* ---- entry point --------------------------------------------------------------------------- */

int pm_ckpt_layout(const json_t *config, pm_ckpt_entry **entries, int *n, pm_err *e) {
    *entries = NULL;
    *n = 0;
    if (!json_is_object(config)) return pm_errf(e, PM_EINVAL, "config.json: not a JSON object");
    llm_dims d;
    int rc = read_llm(config, &d, e);
    if (rc) return rc;
    builder b = {.e = e};
    add(&b, S2(d.V, d.H), "model.embed_tokens.weight");
    if (!rc) rc = add_vision(&b, config, d.H, e);
    if (!rc) rc = add_audio(&b, config, d.H, e);
    if (!rc) {
        add_llm_layers(&b, &d);
        add(&b, S1(d.H), "model.norm.weight");
        if (!d.tied) add(&b, S2(d.V, d.H), "lm_head.weight");
        rc = e->code;
    }
    if (rc) {
        free(b.v);
        return rc;
    }
    *entries = b.v;
    *n = b.n;
    return PM_OK;
}

void pm_ckpt_layout_free(pm_ckpt_entry *entries) { free(entries); }

int64_t pm_ckpt_entry_numel(const pm_ckpt_entry *en) {
    int64_t x = 1;
    for (int i = 0; i < en->ndim; i++) x *= en->shape[i];
    return x;
}
