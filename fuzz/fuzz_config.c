/* fuzz_config.c — libFuzzer harness for the config.json readers: pm_llm_config_parse (decoder,
 * LongRoPE, LoRA, eos ids), pm_conformer_config_parse ("audio_processor") and
 * pm_siglip_config_from_json (SigLIP dims, img_processor.layer_idx).
 *
 * The input is parsed by jansson exactly as pm_model_open reads config.json (JSON_REJECT_DUPLICATES)
 * and is fed to the three parsers as the root config; it is also fed as generation_config.json
 * next to the fixture's config.json, so the eos-id reader sees arbitrary values with a valid config.
 * Every accepted config must satisfy the invariants the model code relies on (divisibility, even
 * rotary dims, finite RoPE scale, eos ids inside the vocabulary, ...): a violated one aborts. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_util.h"
#include "model/conformer.h"
#include "model/llm_config.h"
#include "vision/siglip.h"

static json_t *fixture_config;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char p[1200];
    snprintf(p, sizeof p, "%s/tiny_model/config.json", fuzz_fixture_dir());
    json_error_t je;
    fixture_config = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!fixture_config) {
        fprintf(stderr, "fuzz_config: cannot read %s (set PHI4MM_FIXTURES): %s\n", p, je.text);
        abort();
    }
    return 0;
}

static void check_llm(const pm_llm_config *c) {
    FUZZ_CHECK(c->vocab > 0 && c->hidden > 0 && c->n_layers > 0 && c->intermediate > 0);
    FUZZ_CHECK(c->n_heads > 0 && c->n_kv_heads > 0 && c->n_heads % c->n_kv_heads == 0);
    FUZZ_CHECK(c->head_dim * c->n_heads == c->hidden);
    FUZZ_CHECK(c->rot_dims > 0 && c->rot_dims % 2 == 0 && c->rot_dims <= c->head_dim);
    FUZZ_CHECK(c->n_factors * 2 == c->rot_dims && c->n_factors <= PM_MAX_ROPE_FACTORS);
    for (int i = 0; i < c->n_factors; i++) FUZZ_CHECK(isfinite(c->short_factor[i]) && isfinite(c->long_factor[i]));
    FUZZ_CHECK(isfinite(c->rope_scale) && c->rope_scale >= 1.0f);
    FUZZ_CHECK(isfinite(c->rope_theta) && c->rope_theta > 0);
    FUZZ_CHECK(c->max_pos > 0 && c->orig_max_pos > 0);
    FUZZ_CHECK(c->n_eos >= 1 && c->n_eos <= PM_MAX_EOS);
    for (int i = 0; i < c->n_eos; i++)
        if (!(c->n_eos == 2 && c->eos_ids[0] == 200020 && c->eos_ids[1] == 199999)) /* the built-in default */
            FUZZ_CHECK(c->eos_ids[i] >= 0 && c->eos_ids[i] < c->vocab);
    for (int a = 1; a <= 2; a++) FUZZ_CHECK(c->lora_r[a] >= 1 && isfinite(c->lora_alpha[a]) && c->lora_alpha[a] > 0);
}

static void check_conformer(const pm_conformer_config *c) {
    FUZZ_CHECK(c->input_size == 80);
    FUZZ_CHECK(c->attention_dim > 0 && c->attention_heads > 0 && c->attention_dim % c->attention_heads == 0);
    FUZZ_CHECK(c->linear_units > 0 && c->num_blocks > 0 && c->conv_channels > 0);
    FUZZ_CHECK(c->kernel_size > 0 && c->kernel_size % 2 == 1);
    FUZZ_CHECK(c->time_reduction >= 2 && (c->time_reduction & (c->time_reduction - 1)) == 0);
    FUZZ_CHECK(c->t5_max_distance > 0);
}

static void check_siglip(const pm_siglip_config *c) {
    FUZZ_CHECK(c->hidden > 0 && c->heads > 0 && c->hidden % c->heads == 0);
    FUZZ_CHECK(c->patch_size > 0 && c->image_size >= c->patch_size && c->image_size % c->patch_size == 0);
    FUZZ_CHECK(c->layers > 0 && c->intermediate > 0 && c->channels > 0);
    FUZZ_CHECK(c->layer_idx >= -(c->layers + 1) && c->layer_idx <= c->layers);
    FUZZ_CHECK(c->ln_eps > 0 && c->ln_eps < 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!root) return 0;
    pm_err e = {0};
    pm_llm_config lc;
    if (pm_llm_config_parse(root, NULL, &lc, &e) == PM_OK) check_llm(&lc);
    else FUZZ_CHECK(e.code < 0 && e.msg[0]);
    memset(&e, 0, sizeof e);
    if (pm_llm_config_parse(fixture_config, root, &lc, &e) == PM_OK) check_llm(&lc);
    else FUZZ_CHECK(e.code < 0 && e.msg[0]);

    memset(&e, 0, sizeof e);
    pm_conformer_config cc;
    if (pm_conformer_config_parse(json_object_get(root, "audio_processor"), &cc, &e) == PM_OK) check_conformer(&cc);
    else FUZZ_CHECK(e.code < 0 && e.msg[0]);
    memset(&e, 0, sizeof e);
    if (pm_conformer_config_parse(root, &cc, &e) == PM_OK) check_conformer(&cc); /* the section alone */

    memset(&e, 0, sizeof e);
    pm_siglip_config sc;
    if (pm_siglip_config_from_json(root, &sc, &e) == PM_OK) check_siglip(&sc);
    else FUZZ_CHECK(e.code < 0 && e.msg[0]);
    json_decref(root);
    return 0;
}
