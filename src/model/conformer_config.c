/* conformer_config.c — reads the "audio_processor" section of config.json into a
 * pm_conformer_config (see conformer.h).
 *
 * The official model builds ConformerEncoder(**audio_processor.config), so an absent key takes the
 * constructor's default (e.g. kernel_size 3, time_reduction 4, conv_channels 256) and a present
 * key is checked against what this port implements. The options the official forward would use
 * differently (streaming chunk masks, other subsampling, batch norm, GQA, linear GLU, pointwise
 * simplification, symmetric T5 bias, PyTorch SDPA attention) are refused by name. */
#include "conformer.h"

#include <string.h>
#include <strings.h>

#define W "config.json: audio_processor.config"

/* Integer key with default; range-checked. */
static int get_int(const json_t *o, const char *key, int dflt, long long lo, long long hi, int *out, pm_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return PM_OK;
    }
    if (!json_is_integer(v)) return pm_errf(e, PM_EFORMAT, W ": \"%s\" must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return pm_errf(e, PM_EFORMAT, W ": \"%s\" = %lld is out of range [%lld, %lld]", key, x, lo, hi);
    *out = (int)x;
    return PM_OK;
}

static int get_bool(const json_t *o, const char *key, int dflt, int *out, pm_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return PM_OK;
    }
    if (!json_is_boolean(v)) return pm_errf(e, PM_EFORMAT, W ": \"%s\" must be true or false", key);
    *out = json_is_true(v);
    return PM_OK;
}

/* String key with default; *out points into the JSON (or to dflt). */
static int get_str(const json_t *o, const char *key, const char *dflt, const char **out, pm_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return PM_OK;
    }
    if (!json_is_string(v)) return pm_errf(e, PM_EFORMAT, W ": \"%s\" must be a string", key);
    *out = json_string_value(v);
    return PM_OK;
}

/* Activation names of get_activation()/GLU (case-insensitive there); anything else would be an
 * identity in the official code, which no released checkpoint uses: refused. */
static int parse_act(const char *name, const char *key, pm_cf_act *out, pm_err *e) {
    if (!strcasecmp(name, "swish")) *out = PM_CF_ACT_SWISH;
    else if (!strcasecmp(name, "sigmoid")) *out = PM_CF_ACT_SIGMOID;
    else if (!strcasecmp(name, "relu")) *out = PM_CF_ACT_RELU;
    else if (!strcasecmp(name, "gelu")) *out = PM_CF_ACT_GELU;
    else
        return pm_errf(e, PM_EUNSUPPORTED, W ": \"%s\" = \"%s\" is not supported (swish, sigmoid, relu or gelu)", key, name);
    return PM_OK;
}

static int parse_nemo(const json_t *cfg, pm_conformer_config *c, pm_err *e) {
    json_t *n = json_object_get(cfg, "nemo_conv_settings");
    c->conv_channels = 256;
    if (!n || json_is_null(n)) return PM_OK;
    if (!json_is_object(n)) return pm_errf(e, PM_EFORMAT, W ": \"nemo_conv_settings\" must be an object");
    static const char *const forbidden[] = {"subsampling_factor", "feat_in", "feat_out"};
    for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++)
        if (json_object_get(n, forbidden[i]))
            return pm_errf(e, PM_EFORMAT, W ": nemo_conv_settings.%s must not be set (the official encoder asserts it is given outside)",
                           forbidden[i]);
    int rc;
    if ((rc = get_int(n, "conv_channels", 256, 1, 1 << 16, &c->conv_channels, e))) return rc;
    const char *sub = "";
    if ((rc = get_str(n, "subsampling", "dw_striding", &sub, e))) return rc;
    if (strcmp(sub, "dw_striding"))
        return pm_errf(e, PM_EUNSUPPORTED, W ": nemo_conv_settings.subsampling = \"%s\" is not supported (only \"dw_striding\")", sub);
    int is_causal = 0;
    if ((rc = get_bool(n, "is_causal", 0, &is_causal, e))) return rc;
    if (is_causal) return pm_errf(e, PM_EUNSUPPORTED, W ": nemo_conv_settings.is_causal = true is not supported");
    json_t *cf = json_object_get(n, "subsampling_conv_chunking_factor");
    if (cf && !json_is_null(cf)) { /* only changes how the official code splits work, not the result */
        if (!json_is_integer(cf)) return pm_errf(e, PM_EFORMAT, W ": nemo_conv_settings.subsampling_conv_chunking_factor must be an integer");
        long long f = json_integer_value(cf);
        if (f != -1 && f != 1 && (f <= 0 || (f & (f - 1))))
            return pm_errf(e, PM_EFORMAT, W ": nemo_conv_settings.subsampling_conv_chunking_factor = %lld must be -1, 1 or a power of 2", f);
    }
    return PM_OK;
}

static int parse_rel_bias(const json_t *cfg, pm_conformer_config *c, pm_err *e) {
    json_t *r = json_object_get(cfg, "relative_attention_bias_args");
    if (!r || json_is_null(r))
        return pm_errf(e, PM_EUNSUPPORTED, W ": \"relative_attention_bias_args\" is missing; only the T5 relative bias is supported "
                                           "(the official encoder refuses the absolute-position variant too)");
    if (!json_is_object(r)) return pm_errf(e, PM_EFORMAT, W ": \"relative_attention_bias_args\" must be an object");
    const char *type = "";
    int rc;
    if ((rc = get_str(r, "type", "", &type, e))) return rc;
    if (strcmp(type, "t5"))
        return pm_errf(e, PM_EUNSUPPORTED, W ": relative_attention_bias_args.type = \"%s\" is not supported (only \"t5\")", type);
    if ((rc = get_int(r, "t5_bias_max_distance", 1000, 1, 1 << 20, &c->t5_max_distance, e))) return rc;
    int sym = 0;
    if ((rc = get_bool(r, "t5_bias_symmetric", 0, &sym, e))) return rc;
    if (sym) return pm_errf(e, PM_EUNSUPPORTED, W ": relative_attention_bias_args.t5_bias_symmetric = true is not supported");
    return PM_OK;
}

/* Keys that must hold a given value when present (the default is accepted). */
static int require_bool(const json_t *cfg, const char *key, int dflt, int want, const char *why, pm_err *e) {
    int v = 0, rc;
    if ((rc = get_bool(cfg, key, dflt, &v, e))) return rc;
    if (v != want) return pm_errf(e, PM_EUNSUPPORTED, W ": \"%s\" = %s is not supported (%s)", key, v ? "true" : "false", why);
    return PM_OK;
}

int pm_conformer_config_parse(const json_t *ap, pm_conformer_config *c, pm_err *e) {
    memset(c, 0, sizeof *c);
    if (!json_is_object(ap)) return pm_errf(e, PM_EFORMAT, "config.json: \"audio_processor\" is missing or not an object");
    json_t *name = json_object_get(ap, "name");
    if (!json_is_string(name) || strcmp(json_string_value(name), "cascades"))
        return pm_errf(e, PM_EUNSUPPORTED, "config.json: audio_processor.name is %s%s%s, only \"cascades\" (the Conformer) is supported",
                       json_is_string(name) ? "\"" : "", json_is_string(name) ? json_string_value(name) : "missing",
                       json_is_string(name) ? "\"" : "");
    const json_t *cfg = json_object_get(ap, "config");
    if (!json_is_object(cfg)) return pm_errf(e, PM_EFORMAT, "config.json: audio_processor.config is missing or not an object");
    int rc;

    /* positional arguments of the official constructor: required */
    json_t *isz = json_object_get(cfg, "input_size");
    if (!isz) return pm_errf(e, PM_EFORMAT, W ": missing \"input_size\"");
    if ((rc = get_int(cfg, "input_size", 0, 1, 4096, &c->input_size, e))) return rc;
    if (c->input_size != 80)
        return pm_errf(e, PM_EUNSUPPORTED, W ": \"input_size\" = %d is not supported (the feature extractor makes 80 mel bins)", c->input_size);
    json_t *cs = json_object_get(cfg, "chunk_size");
    if (!cs) return pm_errf(e, PM_EFORMAT, W ": missing \"chunk_size\"");
    if (!json_is_integer(cs))
        return pm_errf(e, PM_EUNSUPPORTED, W ": \"chunk_size\" must be the integer -1 (full attention); variable chunk sizes are not supported");
    if (json_integer_value(cs) != -1)
        return pm_errf(e, PM_EUNSUPPORTED, W ": \"chunk_size\" = %lld is not supported: only -1 (no streaming chunk mask) is implemented",
                       (long long)json_integer_value(cs));
    if (!json_object_get(cfg, "left_chunk")) return pm_errf(e, PM_EFORMAT, W ": missing \"left_chunk\"");

    const char *s = "";
    if ((rc = get_str(cfg, "input_layer", "nemo_conv", &s, e))) return rc;
    if (strcmp(s, "nemo_conv")) return pm_errf(e, PM_EUNSUPPORTED, W ": \"input_layer\" = \"%s\" is not supported (only \"nemo_conv\")", s);

    if ((rc = get_int(cfg, "attention_dim", 256, 1, 1 << 16, &c->attention_dim, e))) return rc;
    if ((rc = get_int(cfg, "attention_heads", 4, 1, 1024, &c->attention_heads, e))) return rc;
    if (c->attention_dim % c->attention_heads)
        return pm_errf(e, PM_EFORMAT, W ": attention_dim %d is not divisible by attention_heads %d", c->attention_dim, c->attention_heads);
    if ((rc = get_int(cfg, "linear_units", 2048, 1, 1 << 20, &c->linear_units, e))) return rc;
    if ((rc = get_int(cfg, "num_blocks", 6, 1, 1024, &c->num_blocks, e))) return rc;
    if ((rc = get_int(cfg, "kernel_size", 3, 1, 255, &c->kernel_size, e))) return rc;
    if (c->kernel_size % 2 == 0) return pm_errf(e, PM_EFORMAT, W ": \"kernel_size\" = %d must be odd", c->kernel_size);
    if ((rc = get_bool(cfg, "causal", 1, &c->causal, e))) return rc;
    if ((rc = get_int(cfg, "time_reduction", 4, 2, 1024, &c->time_reduction, e))) return rc;
    if (c->time_reduction & (c->time_reduction - 1))
        return pm_errf(e, PM_EFORMAT, W ": \"time_reduction\" = %d must be a power of 2 (dw_striding halves the time axis per stage)",
                       c->time_reduction);

    int v = 0;
    if ((rc = get_int(cfg, "ext_pw_out_channel", 0, 0, 1 << 16, &v, e))) return rc;
    if (v != c->attention_dim)
        return pm_errf(e, PM_EUNSUPPORTED, W ": \"ext_pw_out_channel\" = %d is not supported (must equal attention_dim %d)", v, c->attention_dim);
    if ((rc = get_int(cfg, "ext_pw_kernel_size", 1, 1, 255, &v, e))) return rc;
    if (v != 1) return pm_errf(e, PM_EUNSUPPORTED, W ": \"ext_pw_kernel_size\" = %d is not supported (only 1)", v);
    if ((rc = get_int(cfg, "depthwise_seperable_out_channel", 256, 0, 1 << 16, &v, e))) return rc;
    if (v != c->attention_dim)
        return pm_errf(e, PM_EUNSUPPORTED, W ": \"depthwise_seperable_out_channel\" = %d is not supported (must equal attention_dim %d)", v,
                       c->attention_dim);
    if ((rc = get_int(cfg, "depthwise_multiplier", 1, 1, 1024, &v, e))) return rc;
    if (v != 1) return pm_errf(e, PM_EUNSUPPORTED, W ": \"depthwise_multiplier\" = %d is not supported (only 1)", v);
    if ((rc = get_int(cfg, "attention_group_size", 1, 1, 1024, &v, e))) return rc;
    if (v != 1) return pm_errf(e, PM_EUNSUPPORTED, W ": \"attention_group_size\" = %d is not supported (only 1: multi-head attention)", v);

    if ((rc = require_bool(cfg, "batch_norm", 0, 0, "the conv module's batch norm is not implemented", e))) return rc;
    if ((rc = require_bool(cfg, "bias_in_glu", 1, 1, "the GLU biases are required", e))) return rc;
    if ((rc = require_bool(cfg, "linear_glu_in_convm", 0, 0, "only the pointwise-conv GLU is implemented", e))) return rc;
    if ((rc = require_bool(cfg, "export", 0, 0, "export mode changes the conv padding", e))) return rc;
    if ((rc = require_bool(cfg, "use_pt_scaled_dot_product_attention", 0, 0, "only the eager attention path is implemented", e)))
        return rc;

    if ((rc = get_str(cfg, "activation", "relu", &s, e)) || (rc = parse_act(s, "activation", &c->ff_act, e))) return rc;
    if ((rc = get_str(cfg, "conv_activation", "relu", &s, e)) || (rc = parse_act(s, "conv_activation", &c->conv_act, e))) return rc;
    if ((rc = get_str(cfg, "conv_glu_type", "sigmoid", &s, e))) return rc;
    if (strcmp(s, "swish") && strcmp(s, "sigmoid") && strcmp(s, "relu") && strcmp(s, "gelu"))
        return pm_errf(e, PM_EUNSUPPORTED, W ": \"conv_glu_type\" = \"%s\" is not supported (swish, sigmoid, relu or gelu)", s);
    if ((rc = parse_act(s, "conv_glu_type", &c->conv_glu_act, e))) return rc;

    if ((rc = parse_nemo(cfg, c, e))) return rc;
    if ((rc = parse_rel_bias(cfg, c, e))) return rc;

    json_t *ee = json_object_get(cfg, "encoder_embedding_config");
    if (!json_is_object(ee)) return pm_errf(e, PM_EFORMAT, W ": \"encoder_embedding_config\" is missing or not an object");
    if (!json_object_get(ee, "input_size")) return pm_errf(e, PM_EFORMAT, W ": missing \"encoder_embedding_config.input_size\"");
    if ((rc = get_int(ee, "input_size", 0, 1, 4096, &v, e))) return rc;
    if (v != c->input_size)
        return pm_errf(e, PM_EFORMAT, W ": encoder_embedding_config.input_size = %d differs from input_size %d", v, c->input_size);
    return PM_OK;
}
