/* image_embed.h — image features for Phi-4-multimodal (`model.embed_tokens_extend.image_embed`):
 * SigLIP tower → hidden_states[-2] → AvgPool2d(2) per crop → HD merge → img_projection.
 *
 * HD merge ("sub_glb" order, as the real config.json has it): the sub-crop features laid out as
 * one (h*16) x (w*16) grid, cut to the "useful" region (rows/cols whose downsampled patch mask is
 * valid in the first column/row), a `sub_GN` separator after each row; then `glb_GN`; then the
 * global crop's 16 x 16 grid with `sub_GN` after each row. "glb_sub" puts the global part first.
 * Token count = 256 + 1 + Σmask₂ + rows(mask₂) + 16, where mask₂ is the sub-crops' mask sampled
 * at even patch rows/cols (the processor's num_img_tokens). img_projection = Linear(Dv, H) → GELU
 * (erf) → Linear(H, H) ("mlp"), or one Linear ("linear"). */
#ifndef PM_IMAGE_EMBED_H
#define PM_IMAGE_EMBED_H

#include <jansson.h>
#include "io/safetensors.h"
#include "util/err.h"
#include "vision/siglip.h"

typedef struct pm_image_embed pm_image_embed;

/* Loads the SigLIP tower (dims from root_config, see pm_siglip_config_from_json), glb_GN, sub_GN
 * and img_projection (output width llm_hidden), and reads `embd_layer.image_embd_layer` from
 * root_config (crop_size, hd_transform_order, image_token_compression_cls, projection_cls,
 * use_hd_transform). Unsupported variants are refused with PM_EUNSUPPORTED. */
int pm_image_embed_load(pm_image_embed **out, pm_weights *w, const json_t *root_config, int llm_hidden, pm_err *e);
void pm_image_embed_free(pm_image_embed *m);

/* Optional captures for parity (pass NULL to skip). When a trace is passed, every field is set to
 * a malloc'd buffer the caller frees:
 *   embeddings_out   [n_crops, P, Dv]       SigLIP patch + position embeddings (P = grid², 1024)
 *   layer_minus2_out [n_crops, P, Dv]       the features (hidden_states[layer_idx])
 *   avgpool_out      [n_crops, Dv, g/2, g/2] NCHW, as the fixture stores it
 *   hd_merged        [num_tokens, Dv]       the merged features before img_projection */
typedef struct pm_vit_trace {
    float *embeddings_out;
    float *layer_minus2_out;
    float *avgpool_out;
    float *hd_merged;
} pm_vit_trace;

/* Image tokens of one image from its crop masks, without running anything.
 *   crop_mask [n_crops, grid, grid], global crop first (nonzero = valid patch)
 *   h_crops x w_crops: the HD grid (rows x cols); n_crops must be 1 + h_crops*w_crops.
 * Errors when the sub-crop mask is not the top-left rectangle the processor produces. */
int pm_image_embed_count_tokens(int grid, const float *crop_mask, int n_crops, int h_crops, int w_crops, int *num_tokens, pm_err *e);

/* Embeds one image.
 *   pixels    [n_crops, 3, S, S] normalised (x/255*2-1), global view first, then sub-crops row-major
 *   crop_mask [n_crops, grid, grid] patch mask (1 valid), as the processor's image_attention_mask
 *   out       malloc'd [num_tokens, llm_hidden] (caller frees); num_tokens as in count_tokens. */
int pm_image_embed_forward(const pm_image_embed *m, const float *pixels, const float *crop_mask, int n_crops, int h_crops,
                           int w_crops, float **out, int *num_tokens, pm_vit_trace *trace, pm_err *e);

const pm_siglip *pm_image_embed_siglip(const pm_image_embed *m);
int pm_image_embed_hidden(const pm_image_embed *m); /* llm_hidden */

#endif
