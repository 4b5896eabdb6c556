/* model.h — what pm_model holds: the checkpoint's config, mmap'd weights, tokenizer and every
 * module (decoder, speech encoder + projections, vision tower + projection). Read-only after load,
 * so any number of engines and threads may share one model. */
#ifndef PM_ENGINE_MODEL_H
#define PM_ENGINE_MODEL_H

#include <jansson.h>

#include "io/safetensors.h"
#include "model/audio_proj.h"
#include "model/conformer.h"
#include "model/llm.h"
#include "phi4mm.h"
#include "tok/tokenizer.h"
#include "vision/image_embed.h"
#include "vision/siglip.h"

#define PM_IMAGE_TOKEN_ID 200010
#define PM_AUDIO_TOKEN_ID 200011

struct pm_model {
    char *dir;
    json_t *config;
    pm_weights *w;
    pm_tokenizer *tok;
    pm_llm llm;
    pm_conformer_config conf_cfg;
    pm_conformer *conformer;
    pm_audio_proj *audio_proj;
    pm_image_embed *image;
    int dynamic_hd;          /* preprocessor_config.json */
    int audio_compression;   /* audio_compression_rate (8) */
    int audio_downsample;    /* audio_downsample_rate (1) */
    int crop_size;           /* embd_layer.image_embd_layer.crop_size (448) */
    double load_seconds;
    pm_weight_format weights;
    size_t q8_bytes;
    size_t recache_bytes, recache_huge_bytes; /* pm_load_options.recache */
    int compute_bf16;                         /* pm_load_options.compute_bf16, in effect (the CPU has it) */
};

/* SigLIP width and layer count of the vision tower (for info and parity). */
void pm_image_embed_dims(const pm_image_embed *im, int *dim, int *layers);

/* Internal load with a structured error (pm_model_load wraps it). */
int pm_model_open(pm_model **out, const char *dir, const pm_load_options *opts, pm_err *e);

#endif
