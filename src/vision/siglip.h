/* siglip.h — the SigLIP NaViT vision tower of Phi-4-multimodal (`image_embed.img_processor`).
 *
 * Per 448x448 crop: a 14x14/stride-14 patch convolution (im2col + one matmul), plus a learned
 * position embedding indexed by *bucketized fractional coordinates* of the crop's valid patches
 * (so a crop whose valid region is 16x32 patches still spans the whole 32x32 position table), then
 * pre-LN transformer layers whose attention ignores padded patches as keys. The features Phi-4
 * uses are hidden_states[layer_idx] (default -2: the output of the second-to-last layer, no
 * post-LN), so the last layer, `post_layernorm` and the attention-pooling `head.*` are loaded and
 * shape-checked (every checkpoint tensor is consumed) but never computed.
 *
 * The official code hard-codes the so400m dims (hidden 1152, 27 layers, 16 heads, MLP 4304, image
 * 448, patch 14); a config.json may carry `_oracle_siglip_vision_config` (the tiny fixture does),
 * which then wins. */
#ifndef PM_SIGLIP_H
#define PM_SIGLIP_H

#include <jansson.h>
#include "io/safetensors.h"
#include "util/err.h"

typedef enum pm_siglip_act {
    PM_SIGLIP_ACT_GELU_TANH = 0, /* "gelu_pytorch_tanh" / "gelu_new" (the default) */
    PM_SIGLIP_ACT_GELU_ERF = 1   /* "gelu" */
} pm_siglip_act;

typedef struct pm_siglip_config {
    int hidden;        /* Dv */
    int intermediate;  /* MLP width */
    int heads;         /* attention heads (hidden % heads == 0) */
    int layers;        /* encoder layers in the checkpoint */
    int image_size;    /* crop side in pixels */
    int patch_size;    /* conv kernel = stride */
    int channels;      /* 3 */
    float ln_eps;      /* LayerNorm eps (1e-6) */
    pm_siglip_act act; /* MLP activation */
    int layer_idx;     /* hidden_states index used as features, Python-style (negative from the end) */
} pm_siglip_config;

/* Fills c from the root config.json object: `_oracle_siglip_vision_config` when present (its
 * fields, with SigLIP's defaults for absent optional ones), else the real so400m dims; layer_idx
 * from `img_processor.layer_idx` when that is an object, else -2. Validates every value. */
int pm_siglip_config_from_json(const json_t *root_config, pm_siglip_config *c, pm_err *e);

typedef struct pm_siglip pm_siglip;

/* Fetches (and shape-checks) every `model.embed_tokens_extend.image_embed.img_processor.*`
 * tensor, including the unused last layers, post_layernorm and head. Weights stay mmap'd; only
 * the small vectors (norms, biases, position table) are copied to fp32. */
int pm_siglip_load(pm_siglip **out, pm_weights *w, const pm_siglip_config *c, pm_err *e);
void pm_siglip_free(pm_siglip *m);

const pm_siglip_config *pm_siglip_get_config(const pm_siglip *m);
/* Patches per side (image_size / patch_size) and per crop (its square). */
int pm_siglip_grid(const pm_siglip *m);

/* Runs the tower on n_crops crops.
 *   pixels     [n_crops, channels, image_size, image_size], normalised
 *   patch_mask [n_crops, grid, grid], nonzero = valid patch
 *   features   out, caller-allocated [n_crops, grid*grid, hidden] = hidden_states[layer_idx]
 *   embeddings optional out (NULL = skip), caller-allocated, same shape = hidden_states[0]
 * A crop's valid patches must be nb_h x nb_w many (nb_h = valid patches in its first column,
 * nb_w = in its first row), as the official position assignment requires. */
int pm_siglip_forward(const pm_siglip *m, const float *pixels, const float *patch_mask, int n_crops, float *features,
                      float *embeddings, pm_err *e);

/* Position id of every patch of one crop (exposed for tests): ids [grid*grid]; 0 for padded patches. */
int pm_siglip_position_ids(int grid, const float *patch_mask, int *ids, pm_err *e);

#endif
