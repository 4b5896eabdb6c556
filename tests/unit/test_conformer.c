/* test_conformer.c — the speech Conformer and the audio projections against the official
 * outputs of the tiny fixture: every enc/ tensor of the cases audio2 (two clips, frame mask),
 * audio and mixed (one clip, no mask), both projections, and the long clip (> 500 subsampled
 * frames: 500-frame chunks, unmasked zero tail). Also: the config parser on the real checkpoint's
 * section and its refusals, a missing-tensor load error, argument checks, and the masked
 * chunking of a long clip batched with a short one (self-consistency, no fixture exists). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/npy.h"
#include "io/safetensors.h"
#include "model/audio_proj.h"
#include "model/conformer.h"
#include "model/conformer_internal.h"
#include "nn/kernels.h"
#include "test_util.h"

#define TOL 1e-3

typedef struct fx {
    char dir[1024];
    pm_weights *w;
    json_t *cfg;
    pm_conformer_config cc;
    pm_conformer *m;
    pm_audio_proj *proj;
    int hidden;
} fx;

static void path_of(char *buf, size_t n, const fx *f, const char *rel) { snprintf(buf, n, "%.900s/ref/%.250s", f->dir, rel); }

static void load_npy(const fx *f, const char *rel, pm_npy *a) {
    char p[1200];
    path_of(p, sizeof p, f, rel);
    pm_err e = {0};
    if (pm_npy_load(a, p, &e)) fail_msg("cannot load fixture %s: %s", p, e.msg);
}

/* Max |got - ref| over numel elements of ref/<rel>; fails above TOL or on a size mismatch. */
static double cmp_f32(const fx *f, const char *label, const float *got, size_t numel, const char *rel) {
    pm_npy a;
    load_npy(f, rel, &a);
    if (a.numel != numel) fail_msg("%s: %zu values, reference %s has %zu", label, numel, rel, a.numel);
    double md = 0, mr = 0;
    for (size_t i = 0; i < numel; i++) {
        double r = pm_npy_get(&a, i), d = fabs((double)got[i] - r);
        if (!(d <= md)) md = d; /* NaN propagates */
        if (fabs(r) > mr) mr = fabs(r);
    }
    printf("  %-44s max|d|=%.3e (max|ref|=%.3g)\n", label, md, mr);
    pm_npy_free(&a);
    if (!(md <= TOL)) fail_msg("%s: max abs diff %.3e > %.0e", label, md, TOL);
    return md;
}

static void cmp_mask(const fx *f, const char *label, const uint8_t *got, size_t numel, const char *rel) {
    pm_npy a;
    load_npy(f, rel, &a);
    if (a.numel != numel) fail_msg("%s: %zu values, reference %s has %zu", label, numel, rel, a.numel);
    size_t bad = 0;
    for (size_t i = 0; i < numel; i++) bad += (pm_npy_get(&a, i) != 0) != (got[i] != 0);
    printf("  %-44s %zu/%zu differ\n", label, bad, numel);
    pm_npy_free(&a);
    if (bad) fail_msg("%s: %zu of %zu mask values differ", label, bad, numel);
}

static int setup(void **state) {
    fx *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%s/phi4mm-tiny", tu_fixtures());
    char p[1200];
    snprintf(p, sizeof p, "%s/tiny_model/config.json", f->dir);
    json_error_t je;
    f->cfg = json_load_file(p, 0, &je);
    if (!f->cfg) {
        fprintf(stderr, "test_conformer: cannot read %s: %s (set PHI4MM_FIXTURES)\n", p, je.text);
        free(f);
        return -1;
    }
    pm_err e = {0};
    snprintf(p, sizeof p, "%s/tiny_model", f->dir);
    if (pm_weights_open(&f->w, p, &e) || pm_conformer_config_parse(json_object_get(f->cfg, "audio_processor"), &f->cc, &e) ||
        pm_conformer_load(&f->m, f->w, &f->cc, &e)) {
        fprintf(stderr, "test_conformer: %s\n", e.msg);
        return -1;
    }
    f->hidden = (int)json_integer_value(json_object_get(f->cfg, "hidden_size"));
    if (pm_audio_proj_load(&f->proj, f->w, pm_conformer_dim(f->m), f->hidden, &e)) {
        fprintf(stderr, "test_conformer: %s\n", e.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fx *f = *state;
    if (!f) return 0;
    pm_audio_proj_free(f->proj);
    pm_conformer_free(f->m);
    pm_weights_close(f->w);
    json_decref(f->cfg);
    free(f);
    return 0;
}

/* Every encoder tensor of ref/cases/<name>/ and both projections. */
/* One encoder forward of a fixture case at the kernel level in use, every stage against the reference. */
static void check_forward(fx *f, const char *name, const pm_npy *in, const pm_npy *sizes, int n_clips, int t_max, const int *frames,
                          int has_mask) {
    char rel[256];
    int nb = f->cc.num_blocks, D = pm_conformer_dim(f->m), H = f->cc.attention_heads;
    float **bo = calloc((size_t)nb, sizeof *bo);
    pm_conformer_trace tr = {0};
    pm_conformer_trace_want_all(&tr, bo);
    float *out = NULL;
    int Tp = 0;
    pm_err e = {0};
    int rc = pm_conformer_forward(f->m, in->data, n_clips, t_max, frames, has_mask, &out, &Tp, &tr, &e);
    if (rc) fail_msg("forward: %s", e.msg);
    assert_int_equal(Tp, (t_max + 7) / 8);
    for (int b = 0; b < n_clips; b++) assert_int_equal((int)pm_npy_get(sizes, (size_t)b), (frames[b] + 7) / 8);
    size_t nT = (size_t)n_clips * Tp * D;
    char lab[128];
#define REL(x) (snprintf(rel, sizeof rel, "cases/%s/%s", name, x), rel)
    cmp_f32(f, "normalized_features", tr.normalized, (size_t)n_clips * t_max * 80, REL("enc/normalized_features.npy"));
    cmp_f32(f, "subsample_out", tr.subsample_out, nT, REL("enc/subsample_out.npy"));
    if (has_mask) cmp_mask(f, "subsample_pad_mask", tr.pad_mask, (size_t)n_clips * Tp, REL("enc/subsample_pad_mask.npy"));
    cmp_f32(f, "t5_rel_bias", tr.t5_bias, (size_t)H * Tp * Tp, REL("enc/t5_rel_bias.npy"));
    cmp_mask(f, "hs_mask", tr.hs_mask, (size_t)n_clips * Tp * Tp, REL("enc/hs_mask.npy"));
    for (int i = 0; i < nb; i++) {
        char file[64];
        snprintf(lab, sizeof lab, "block%d_out", i);
        snprintf(file, sizeof file, "enc/block%d_out.npy", i);
        cmp_f32(f, lab, bo[i], nT, REL(file));
    }
    cmp_f32(f, "encoder_out (trace)", tr.encoder_out, nT, REL("enc/encoder_out.npy"));
    cmp_f32(f, "encoder_out", out, nT, REL("enc/encoder_out.npy"));
    float *y = malloc((size_t)n_clips * Tp * f->hidden * sizeof(float));
    assert_int_equal(pm_audio_proj_forward(f->proj, PM_AUDIO_PROJ_SPEECH, out, n_clips * Tp, y, &e), 0);
    cmp_f32(f, "audio_proj_speech", y, (size_t)n_clips * Tp * f->hidden, REL("audio_proj_speech.npy"));
    assert_int_equal(pm_audio_proj_forward(f->proj, PM_AUDIO_PROJ_VISION, out, n_clips * Tp, y, &e), 0);
    cmp_f32(f, "audio_proj_vision", y, (size_t)n_clips * Tp * f->hidden, REL("audio_proj_vision.npy"));
#undef REL
    free(y);
    free(out);
    pm_conformer_trace_free(&tr, nb);
    free(bo);
}

static void run_case(fx *f, const char *name) {
    char rel[256];
    printf("case %s\n", name);
    pm_npy in, sizes;
    snprintf(rel, sizeof rel, "cases/%s/input_audio_embeds.npy", name);
    load_npy(f, rel, &in);
    snprintf(rel, sizeof rel, "cases/%s/audio_embed_sizes.npy", name);
    load_npy(f, rel, &sizes);
    int n_clips = (int)in.shape[0], t_max = (int)in.shape[1];
    assert_int_equal(in.shape[2], 80);
    int frames[16];
    assert_true(n_clips <= 16);
    snprintf(rel, sizeof rel, "cases/%s/audio_attention_mask.npy", name);
    char p[1200];
    path_of(p, sizeof p, f, rel);
    FILE *fp = fopen(p, "rb");
    int has_mask = fp != NULL;
    if (fp) fclose(fp);
    if (has_mask) {
        pm_npy mask;
        load_npy(f, rel, &mask);
        for (int b = 0; b < n_clips; b++) {
            frames[b] = 0;
            for (int t = 0; t < t_max; t++) frames[b] += pm_npy_get(&mask, (size_t)b * t_max + t) != 0;
        }
        pm_npy_free(&mask);
    } else {
        assert_int_equal(n_clips, 1); /* the processor makes a mask whenever there are several clips */
        frames[0] = t_max;
    }

    /* at the best level and, on AVX-512, again capped to AVX2: the attention fused, then on sgemm */
    int passes = pm_kern_level_in_use() == PM_KERN_AVX512 ? 2 : 1;
    for (int pass = 0; pass < passes; pass++) {
        pm_kern_cap(pass ? PM_KERN_AVX2 : PM_KERN_AVX512);
        printf("  at %s (attention %s)\n", pm_kern_level_name(pm_kern_level_in_use()), pm_kern_flash_takes() ? "fused" : "on sgemm");
        check_forward(f, name, &in, &sizes, n_clips, t_max, frames, has_mask);
        pm_kern_cap(PM_KERN_AVX512);
    }
    pm_npy_free(&in);
    pm_npy_free(&sizes);
}

static void test_case_audio2(void **state) { run_case(*state, "audio2"); }
static void test_case_audio(void **state) { run_case(*state, "audio"); }
static void test_case_mixed(void **state) { run_case(*state, "mixed"); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 4098 log-mel frames -> 513 subsampled: chunks of 500 + 13 (+ 487 attended zero rows). */
static void test_long_clip(void **state) {
    fx *f = *state;
    printf("long clip\n");
    pm_npy lm;
    load_npy(f, "audio/clip_long_16k/logmel.npy", &lm);
    int t_max = (int)lm.shape[0], frames = t_max, Tp = 0, D = pm_conformer_dim(f->m);
    float *out = NULL;
    pm_err e = {0};
    double t0 = now();
    if (pm_conformer_forward(f->m, lm.data, 1, t_max, &frames, 0, &out, &Tp, NULL, &e)) fail_msg("forward: %s", e.msg);
    printf("  forward of %d frames: %.3f s\n", t_max, now() - t0);
    assert_int_equal(Tp, 513);
    cmp_f32(f, "encoder_out", out, (size_t)Tp * D, "audio/clip_long_16k/encoder_out.npy");
    float *y = malloc((size_t)Tp * f->hidden * sizeof(float));
    assert_int_equal(pm_audio_proj_forward(f->proj, PM_AUDIO_PROJ_SPEECH, out, Tp, y, &e), 0);
    cmp_f32(f, "proj_speech", y, (size_t)Tp * f->hidden, "audio/clip_long_16k/proj_speech.npy");
    free(y);
    free(out);
    pm_npy_free(&lm);
}

/* The matrices' GEMM-ready copies (conformer_pack.c): made by the second forward where the CPU has
 * the AVX-512 tile, none otherwise; the long clip's 1000 rows take the GEMM with or without them,
 * and the copies give the same bits. */
static void test_packed_weights(void **state) {
    fx *f = *state;
    pm_npy lm;
    load_npy(f, "audio/clip_long_16k/logmel.npy", &lm);
    int t_max = (int)lm.shape[0], frames = t_max, Tp = 0, D = pm_conformer_dim(f->m), nb = f->m->c.num_blocks;
    float *packed = NULL, *plain = NULL;
    pm_err e = {0};
    for (int pass = 0; pass < 2; pass++) { /* the second forward of the process at the latest makes them */
        free(packed);
        packed = NULL;
        assert_int_equal(pm_conformer_forward(f->m, lm.data, 1, t_max, &frames, 0, &packed, &Tp, NULL, &e), 0);
    }
    const uint16_t **keep = calloc((size_t)nb * 3, sizeof *keep);
    for (int i = 0; i < nb; i++) {
        pm_cf_block *b = &f->m->blocks[i];
        pm_tensor *t[3] = {&b->wq, &b->ff_in.w1, &b->ext_w};
        for (int j = 0; j < 3; j++) {
            if (pm_kern_have_avx512()) assert_non_null(t[j]->gemm_pack);
            else assert_null(t[j]->gemm_pack);
            keep[i * 3 + j] = t[j]->gemm_pack;
            t[j]->gemm_pack = NULL;
        }
    }
    assert_int_equal(pm_conformer_forward(f->m, lm.data, 1, t_max, &frames, 0, &plain, &Tp, NULL, &e), 0);
    for (int i = 0; i < nb; i++) {
        pm_cf_block *b = &f->m->blocks[i];
        b->wq.gemm_pack = keep[i * 3], b->ff_in.w1.gemm_pack = keep[i * 3 + 1], b->ext_w.gemm_pack = keep[i * 3 + 2];
    }
    assert_memory_equal(packed, plain, sizeof(float) * (size_t)Tp * D);
    free(keep); free(packed); free(plain);
    pm_npy_free(&lm);
}

/* A long clip batched (with a frame mask) with a short one whose length is a multiple of 8, so
 * that no subsampled frame of it reads padding, and the long clip again (6 sequences of 500:
 * more than one group of sequences goes through the blocks):
 *  - the long clip's first chunk is independent of the rest: equal to the fixture's rows 0..499;
 *  - its masked last chunk equals the same clip run alone with a frame mask, and differs from
 *    the unmasked official output (the mask has an effect);
 *  - the short clip's valid rows equal the short clip run alone;
 *  - the third clip (in another group) equals the first. */
static void test_long_batch_masks(void **state) {
    fx *f = *state;
    printf("long + short + long batch with a frame mask\n");
    pm_npy lm, ref;
    load_npy(f, "audio/clip_long_16k/logmel.npy", &lm);
    load_npy(f, "audio/clip_long_16k/encoder_out.npy", &ref);
    int T = (int)lm.shape[0], Ts = 192, D = pm_conformer_dim(f->m);
    float *feats = calloc((size_t)3 * T * 80, sizeof(float));
    memcpy(feats, lm.data, (size_t)T * 80 * sizeof(float));
    memcpy(feats + (size_t)T * 80, (const float *)lm.data + (size_t)1000 * 80, (size_t)Ts * 80 * sizeof(float));
    memcpy(feats + (size_t)2 * T * 80, lm.data, (size_t)T * 80 * sizeof(float));
    int frames[3] = {T, Ts, T}, Tp = 0, Tp1 = 0, Tp2 = 0;
    float *out = NULL, *solo = NULL, *shortout = NULL;
    pm_err e = {0};
    assert_int_equal(pm_conformer_forward(f->m, feats, 3, T, frames, 1, &out, &Tp, NULL, &e), 0);
    assert_int_equal(Tp, 513);
    assert_int_equal(pm_conformer_forward(f->m, feats, 1, T, frames, 1, &solo, &Tp1, NULL, &e), 0);
    assert_int_equal(pm_conformer_forward(f->m, feats + (size_t)T * 80, 1, Ts, &Ts, 0, &shortout, &Tp2, NULL, &e), 0);
    assert_int_equal(Tp2, Ts / 8);
    double d_first = 0, d_last = 0, d_unmasked = 0, d_short = 0, d_third = 0;
    for (int t = 0; t < Tp; t++)
        for (int j = 0; j < D; j++) {
            size_t i = (size_t)t * D + j;
            double g = out[i], r = pm_npy_get(&ref, i), s = solo[i];
            if (t < 500) d_first = fmax(d_first, fabs(g - r));
            else {
                d_last = fmax(d_last, fabs(g - s));
                d_unmasked = fmax(d_unmasked, fabs(g - r));
            }
            d_third = fmax(d_third, fabs(g - out[(size_t)2 * Tp * D + i]));
        }
    for (int t = 0; t < Tp2; t++)
        for (int j = 0; j < D; j++)
            d_short = fmax(d_short, fabs(out[((size_t)Tp + t) * D + j] - shortout[(size_t)t * D + j]));
    printf("  first chunk vs official unmasked       max|d|=%.3e\n", d_first);
    printf("  masked last chunk vs solo masked       max|d|=%.3e\n", d_last);
    printf("  masked last chunk vs official unmasked max|d|=%.3e (must differ)\n", d_unmasked);
    printf("  short clip in batch vs alone           max|d|=%.3e\n", d_short);
    printf("  third clip (second group) vs first     max|d|=%.3e\n", d_third);
    assert_true(d_first <= TOL);
    assert_true(d_last <= 1e-5);
    assert_true(d_unmasked > 1e-2);
    assert_true(d_short <= 1e-4);
    assert_true(d_third <= 1e-5);
    free(out); free(solo); free(shortout); free(feats);
    pm_npy_free(&lm);
    pm_npy_free(&ref);
}

static void test_bad_args(void **state) {
    fx *f = *state;
    float feats[16 * 80] = {0}, *out = (float *)1;
    int Tp = -1, frames[2] = {16, 17};
    pm_err e = {0};
    assert_int_equal(pm_conformer_forward(f->m, feats, 1, 16, frames + 1, 1, &out, &Tp, NULL, &e), PM_EINVAL);
    assert_null(out);
    assert_non_null(strstr(e.msg, "frames"));
    pm_err_clear(&e);
    frames[0] = 0;
    assert_int_equal(pm_conformer_forward(f->m, feats, 1, 16, frames, 1, &out, &Tp, NULL, &e), PM_EINVAL);
    pm_err_clear(&e);
    assert_int_equal(pm_conformer_forward(f->m, feats, 0, 16, frames, 1, &out, &Tp, NULL, &e), PM_EINVAL);
    pm_err_clear(&e);
    assert_int_equal(pm_audio_proj_forward(f->proj, 2, feats, 1, feats, &e), PM_EINVAL);
    /* one frame is enough: T' = 1 */
    pm_err_clear(&e);
    frames[0] = 1;
    assert_int_equal(pm_conformer_forward(f->m, feats, 1, 1, frames, 0, &out, &Tp, NULL, &e), 0);
    assert_int_equal(Tp, 1);
    for (int j = 0; j < pm_conformer_dim(f->m); j++) assert_true(isfinite(out[j]));
    free(out);
}

/* The real checkpoint's audio_processor section (shared/spec/real_config.json). */
static const char *real_ap =
    "{\"config\": {\"activation\": \"swish\", \"activation_checkpointing\": {\"interval\": 1, \"module\": \"transformer\", "
    "\"offload\": false}, \"attention_dim\": 1024, \"attention_heads\": 16, \"batch_norm\": false, \"bias_in_glu\": true, "
    "\"causal\": true, \"chunk_size\": -1, \"cnn_layer_norm\": true, \"conv_activation\": \"swish\", \"conv_glu_type\": \"swish\", "
    "\"depthwise_multiplier\": 1, \"depthwise_seperable_out_channel\": 1024, \"dropout_rate\": 0.0, \"encoder_embedding_config\": "
    "{\"input_size\": 80}, \"ext_pw_kernel_size\": 1, \"ext_pw_out_channel\": 1024, \"input_layer\": \"nemo_conv\", \"input_size\": 80, "
    "\"kernel_size\": 3, \"left_chunk\": 18, \"linear_units\": 1536, \"nemo_conv_settings\": {\"conv_channels\": 1024}, "
    "\"num_blocks\": 24, \"relative_attention_bias_args\": {\"t5_bias_max_distance\": 500, \"type\": \"t5\"}, "
    "\"time_reduction\": 8}, \"name\": \"cascades\"}";

static void test_config_real(void **state) {
    (void)state;
    json_error_t je;
    json_t *ap = json_loads(real_ap, 0, &je);
    assert_non_null(ap);
    pm_conformer_config c;
    pm_err e = {0};
    assert_int_equal(pm_conformer_config_parse(ap, &c, &e), 0);
    assert_int_equal(c.attention_dim, 1024);
    assert_int_equal(c.attention_heads, 16);
    assert_int_equal(c.linear_units, 1536);
    assert_int_equal(c.num_blocks, 24);
    assert_int_equal(c.conv_channels, 1024);
    assert_int_equal(c.time_reduction, 8);
    assert_int_equal(c.kernel_size, 3);
    assert_int_equal(c.t5_max_distance, 500);
    assert_int_equal(c.causal, 1);
    assert_int_equal(c.ff_act, PM_CF_ACT_SWISH);
    json_decref(ap);
}

/* Each mutation of the tiny config must be refused with the given code and a message naming the key. */
static void test_config_refusals(void **state) {
    fx *f = *state;
    struct { const char *path, *json; int code; const char *needle; } cases[] = {
        {"config.chunk_size", "18", PM_EUNSUPPORTED, "chunk_size"},
        {"config.chunk_size", "[18, 36]", PM_EUNSUPPORTED, "chunk_size"},
        {"config.attention_heads", "5", PM_EFORMAT, "attention_heads"},
        {"config.kernel_size", "4", PM_EFORMAT, "kernel_size"},
        {"name", "\"conformer\"", PM_EUNSUPPORTED, "cascades"},
        {"config.input_layer", "\"conv2d\"", PM_EUNSUPPORTED, "input_layer"},
        {"config.relative_attention_bias_args", "{\"type\": \"alibi\"}", PM_EUNSUPPORTED, "t5"},
        {"config.relative_attention_bias_args", "null", PM_EUNSUPPORTED, "relative_attention_bias_args"},
        {"config.batch_norm", "true", PM_EUNSUPPORTED, "batch_norm"},
        {"config.attention_dim", "\"96\"", PM_EFORMAT, "attention_dim"},
        {"config.time_reduction", "6", PM_EFORMAT, "time_reduction"},
        {"config.nemo_conv_settings", "{\"conv_channels\": 32, \"subsampling\": \"striding\"}", PM_EUNSUPPORTED, "subsampling"},
        {"config.ext_pw_out_channel", "0", PM_EUNSUPPORTED, "ext_pw_out_channel"},
        {"config.activation", "\"tanh\"", PM_EUNSUPPORTED, "activation"},
        {"config.encoder_embedding_config", "null", PM_EFORMAT, "encoder_embedding_config"},
        {"config.input_size", "64", PM_EUNSUPPORTED, "input_size"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *ap = json_deep_copy(json_object_get(f->cfg, "audio_processor"));
        json_t *obj = ap;
        const char *key = cases[i].path;
        if (!strncmp(key, "config.", 7)) {
            obj = json_object_get(ap, "config");
            key += 7;
        }
        json_error_t je;
        json_t *v = json_loads(cases[i].json, JSON_DECODE_ANY, &je);
        assert_non_null(v);
        json_object_set_new(obj, key, v);
        pm_conformer_config c;
        pm_err e = {0};
        int rc = pm_conformer_config_parse(ap, &c, &e);
        printf("  %-40s -> %d: %s\n", cases[i].path, rc, e.msg);
        assert_int_equal(rc, cases[i].code);
        assert_non_null(strstr(e.msg, cases[i].needle));
        json_decref(ap);
    }
    pm_conformer_config c;
    pm_err e = {0};
    assert_int_equal(pm_conformer_config_parse(NULL, &c, &e), PM_EFORMAT);
}

/* A config with one block more than the checkpoint has: the load names the missing tensor. */
static void test_load_missing_tensor(void **state) {
    fx *f = *state;
    pm_conformer_config c = f->cc;
    c.num_blocks++;
    pm_err e = {0};
    pm_conformer *m = (pm_conformer *)1;
    assert_true(pm_conformer_load(&m, f->w, &c, &e) < 0);
    assert_null(m);
    printf("  %s\n", e.msg);
    assert_non_null(strstr(e.msg, "encoders.3."));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_case_audio2),      cmocka_unit_test(test_case_audio),  cmocka_unit_test(test_case_mixed),
        cmocka_unit_test(test_long_clip),        cmocka_unit_test(test_long_batch_masks), cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_packed_weights),
        cmocka_unit_test(test_config_real),      cmocka_unit_test(test_config_refusals),
        cmocka_unit_test(test_load_missing_tensor),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
