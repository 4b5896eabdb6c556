/* ckpt_layout.h — the complete tensor list of a Phi-4-multimodal checkpoint, derived from config.json.
 *
 * One function turns a parsed config.json into every tensor name and shape the official
 * Phi4MMForCausalLM state dict holds (what `model-*.safetensors` must contain, no more, no less):
 * the Phi-4-mini decoder (fused qkv / gate_up, base_layer + lora_A/lora_B for the speech and
 * vision adapters, tied lm_head so no lm_head.weight), the Conformer audio encoder (mean/invstd
 * normalisation, NeMo dw-striding subsampling, blocks, T5 bias), the two audio projections,
 * the SigLIP tower (embeddings, layers, post_layernorm, pooling head), the HD separators and the
 * image projection. The real config gives 2047 tensors; the tiny fixture config 269.
 *
 * SigLIP dims are hard-coded in the official vision code, not in config.json; a config may carry
 * them in a non-official `_oracle_siglip_vision_config` block (the fixture does), else the real
 * so400m dims are used (pm_ckpt_siglip_dims). Used by `phi4mm synth` to write checkpoints and by
 * tests to check a loader against the exact official name list. */
#ifndef PM_CKPT_LAYOUT_H
#define PM_CKPT_LAYOUT_H

#include <jansson.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "util/err.h"

#define PM_CKPT_NAME_MAX 128

typedef struct pm_ckpt_entry {
    char name[PM_CKPT_NAME_MAX];
    int ndim;
    int64_t shape[PM_MAX_DIMS];   /* only the first ndim are meaningful; the rest are 0 */
} pm_ckpt_entry;

/* SigLIP vision tower dims (hidden, MLP intermediate, layers, heads, patch and image size). */
typedef struct pm_siglip_dims {
    int64_t hidden, intermediate, layers, heads, patch, image;
} pm_siglip_dims;

/* Fills *entries (malloc'd array, free with pm_ckpt_layout_free) and *n with every tensor of the
 * checkpoint that `config` (the parsed config.json object) describes, in module order (decoder
 * embedding, image embedding, audio embedding, decoder layers, final norm). Errors (PM_EINVAL /
 * PM_EUNSUPPORTED) name the config key that is missing, malformed or not supported. */
int pm_ckpt_layout(const json_t *config, pm_ckpt_entry **entries, int *n, pm_err *e);
void pm_ckpt_layout_free(pm_ckpt_entry *entries);

/* Number of elements of one entry. */
int64_t pm_ckpt_entry_numel(const pm_ckpt_entry *en);

/* The SigLIP dims this config implies: `_oracle_siglip_vision_config` when present, else the real
 * ones (1152 hidden, 4304 intermediate, 27 layers, 16 heads, patch 14, image 448). */
int pm_ckpt_siglip_dims(const json_t *config, pm_siglip_dims *d, pm_err *e);

#endif
