/* test_ckpt_layout.c — the tensor list derived from config.json against real checkpoints:
 *  - the tiny fixture: same 269 names and shapes as its model.safetensors and its index;
 *  - the real config (../shared/spec/real_config.json and the embedded `full` synth preset): 2047;
 *  - the embedded presets equal the shared config files;
 *  - bad configs give errors naming the key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/ckpt_layout.h"
#include "model/synth_presets.h"
#include "test_util.h"

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fprintf(stderr, "cannot load %s: %s\n", path, je.text);
    return j;
}

static void test_tiny_matches_fixture(void **state) {
    (void)state;
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/phi4mm-tiny/tiny_model", tu_fixtures());
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = load_json(path);
    assert_non_null(cfg);
    pm_err e = {0};
    pm_ckpt_entry *v;
    int n;
    assert_int_equal(pm_ckpt_layout(cfg, &v, &n, &e), PM_OK);
    assert_int_equal(n, 269);

    pm_weights *w;
    int rc = pm_weights_open(&w, dir, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    assert_int_equal(rc, PM_OK);
    assert_int_equal(pm_weights_count(w), 269);
    for (int i = 0; i < n; i++) {
        const pm_tensor *t = pm_weights_find(w, v[i].name);
        if (!t) fprintf(stderr, "layout tensor %s not in fixture\n", v[i].name);
        assert_non_null(t);
        assert_int_equal(t->ndim, v[i].ndim);
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] != v[i].shape[d]) fprintf(stderr, "%s dim %d: fixture %lld layout %lld\n", v[i].name, d,
                                                      (long long)t->shape[d], (long long)v[i].shape[d]);
            assert_int_equal(t->shape[d], v[i].shape[d]);
        }
        for (int j = 0; j < i; j++) assert_string_not_equal(v[i].name, v[j].name); /* no duplicates */
    }
    pm_weights_close(w);

    /* The index lists the same names. */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_t *idx = load_json(path);
    assert_non_null(idx);
    json_t *wm = json_object_get(idx, "weight_map");
    assert_int_equal(json_object_size(wm), (size_t)n);
    for (int i = 0; i < n; i++) assert_non_null(json_object_get(wm, v[i].name));
    json_decref(idx);
    pm_ckpt_layout_free(v);
    json_decref(cfg);
}

static int64_t total_params(const pm_ckpt_entry *v, int n) {
    int64_t s = 0;
    for (int i = 0; i < n; i++) s += pm_ckpt_entry_numel(&v[i]);
    return s;
}

static void test_real_config_2047(void **state) {
    (void)state;
    char path[1100];
    snprintf(path, sizeof path, "%s/../spec/real_config.json", tu_fixtures());
    json_t *cfg = load_json(path);
    assert_non_null(cfg);
    pm_err e = {0};
    pm_ckpt_entry *v;
    int n;
    assert_int_equal(pm_ckpt_layout(cfg, &v, &n, &e), PM_OK);
    assert_int_equal(n, 2047);
    int64_t np = total_params(v, n);
    fprintf(stderr, "real config: %d tensors, %lld parameters\n", n, (long long)np);
    /* Phi-4-multimodal-instruct: 5.57 B parameters (3.8 B LLM + LoRA + encoders). */
    assert_true(np > 5500000000LL && np < 5700000000LL);
    /* Spot-check shapes that follow from the config. */
    for (int i = 0; i < n; i++) {
        if (!strcmp(v[i].name, "model.layers.31.self_attn.qkv_proj.base_layer.weight")) {
            assert_int_equal(v[i].shape[0], 5120);
            assert_int_equal(v[i].shape[1], 3072);
        }
        if (!strcmp(v[i].name, "model.layers.0.mlp.down_proj.lora_A.speech.weight")) {
            assert_int_equal(v[i].shape[0], 320);
            assert_int_equal(v[i].shape[1], 8192);
        }
        if (!strcmp(v[i].name, "model.embed_tokens_extend.audio_embed.encoder.embed.out.weight")) {
            assert_int_equal(v[i].shape[0], 1024);
            assert_int_equal(v[i].shape[1], 10240);
        }
        if (!strcmp(v[i].name, "model.embed_tokens_extend.image_embed.img_projection.0.weight")) {
            assert_int_equal(v[i].shape[0], 3072);
            assert_int_equal(v[i].shape[1], 1152);
        }
        assert_true(strcmp(v[i].name, "lm_head.weight") != 0);
    }
    pm_ckpt_layout_free(v);
    json_decref(cfg);
}

/* The embedded synth presets are the shared config files, value for value. */
static void test_presets_equal_shared_files(void **state) {
    (void)state;
    struct { const char *preset, *file; } cases[] = {
        {"full", "%s/../spec/real_config.json"},
        {"tiny", "%s/phi4mm-tiny/tiny_model/config.json"},
    };
    for (size_t k = 0; k < 2; k++) {
        char path[1100];
        snprintf(path, sizeof path, cases[k].file, tu_fixtures());
        json_t *ref = load_json(path);
        assert_non_null(ref);
        char *txt = pm_synth_preset_text(cases[k].preset, PM_SYNTH_FILE_CONFIG);
        assert_non_null(txt);
        json_error_t je;
        json_t *got = json_loads(txt, 0, &je);
        assert_non_null(got);
        assert_true(json_equal(ref, got));
        pm_err e = {0};
        pm_ckpt_entry *v;
        int n;
        assert_int_equal(pm_ckpt_layout(got, &v, &n, &e), PM_OK);
        assert_int_equal(n, k == 0 ? 2047 : 269);
        pm_ckpt_layout_free(v);
        free(txt);
        json_decref(got);
        json_decref(ref);
    }
    char path[1100];
    snprintf(path, sizeof path, "%s/../spec/real_preprocessor_config.json", tu_fixtures());
    json_t *ref = load_json(path);
    char *txt = pm_synth_preset_text("full", PM_SYNTH_FILE_PREPROCESSOR);
    json_t *got = json_loads(txt, 0, NULL);
    assert_true(ref && got && json_equal(ref, got));
    json_decref(ref);
    json_decref(got);
    free(txt);
}

/* Without `_oracle_siglip_vision_config` the real SigLIP dims apply. */
static void test_siglip_default_dims(void **state) {
    (void)state;
    json_t *cfg = json_object();
    pm_siglip_dims s;
    pm_err e = {0};
    assert_int_equal(pm_ckpt_siglip_dims(cfg, &s, &e), PM_OK);
    assert_int_equal(s.hidden, 1152);
    assert_int_equal(s.intermediate, 4304);
    assert_int_equal(s.layers, 27);
    json_decref(cfg);
}

static void expect_error(const char *preset, const char *key_path, json_t *newval, int code, const char *needle) {
    char *txt = pm_synth_preset_text(preset, PM_SYNTH_FILE_CONFIG);
    json_t *cfg = json_loads(txt, 0, NULL);
    free(txt);
    assert_non_null(cfg);
    /* key_path: "a" or "a.b.c" */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", key_path);
    json_t *obj = cfg;
    char *tok = strtok(buf, ".");
    for (;;) {
        char *next = strtok(NULL, ".");
        if (!next) break;
        obj = json_object_get(obj, tok);
        assert_non_null(obj);
        tok = next;
    }
    if (newval) json_object_set_new(obj, tok, newval);
    else json_object_del(obj, tok);
    pm_err e = {0};
    pm_ckpt_entry *v = (pm_ckpt_entry *)1;
    int n = -1;
    assert_int_equal(pm_ckpt_layout(cfg, &v, &n, &e), code);
    assert_null(v);
    assert_int_equal(n, 0);
    if (!strstr(e.msg, needle)) fprintf(stderr, "message '%s' lacks '%s'\n", e.msg, needle);
    assert_non_null(strstr(e.msg, needle));
    json_decref(cfg);
}

static void test_bad_configs(void **state) {
    (void)state;
    expect_error("tiny", "hidden_size", NULL, PM_EINVAL, "hidden_size is missing");
    expect_error("tiny", "num_key_value_heads", json_integer(3), PM_EINVAL, "num_key_value_heads");
    expect_error("tiny", "vocab_size", json_string("many"), PM_EINVAL, "vocab_size is not an integer");
    expect_error("tiny", "speech_lora.r", json_integer(0), PM_EINVAL, "speech_lora.r");
    expect_error("full", "audio_processor.config.input_layer", json_string("conv2d"), PM_EUNSUPPORTED, "input_layer");
    expect_error("full", "audio_processor.config.time_reduction", json_integer(6), PM_EINVAL, "time_reduction");
    expect_error("tiny", "_oracle_siglip_vision_config.hidden_size", json_integer(50), PM_EINVAL, "hidden_size");
    expect_error("full", "embd_layer.image_embd_layer", NULL, PM_EINVAL, "image_embd_layer is missing");
}

/* Optional structure follows the official constructors: untied embeddings add lm_head.weight; no
 * LoRA sections means no adapter tensors; time_reduction 4 means one depthwise stage. */
static void test_config_variants(void **state) {
    (void)state;
    char *txt = pm_synth_preset_text("tiny", PM_SYNTH_FILE_CONFIG);
    json_t *cfg = json_loads(txt, 0, NULL);
    free(txt);
    json_object_set_new(cfg, "tie_word_embeddings", json_false());
    json_object_del(cfg, "vision_lora");
    json_object_set_new(json_object_get(json_object_get(cfg, "audio_processor"), "config"), "time_reduction", json_integer(4));
    pm_err e = {0};
    pm_ckpt_entry *v;
    int n;
    assert_int_equal(pm_ckpt_layout(cfg, &v, &n, &e), PM_OK);
    /* 269 + lm_head - 3 layers x 4 linears x 2 vision tensors - conv.5/conv.6 (4 tensors) */
    assert_int_equal(n, 269 + 1 - 24 - 4);
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(v[i].name, "lm_head.weight")) found = 1;
        assert_null(strstr(v[i].name, "lora_A.vision"));
        if (!strcmp(v[i].name, "model.embed_tokens_extend.audio_embed.encoder.embed.out.weight"))
            assert_int_equal(v[i].shape[1], 32 * 20);
    }
    assert_true(found);
    pm_ckpt_layout_free(v);
    json_decref(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_matches_fixture),
        cmocka_unit_test(test_real_config_2047),
        cmocka_unit_test(test_presets_equal_shared_files),
        cmocka_unit_test(test_siglip_default_dims),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_config_variants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
