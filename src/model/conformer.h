/* conformer.h — the speech encoder of Phi-4-multimodal (`audio_embed.encoder`, the "cascades"
 * Conformer): global mean/invstd normalisation, NeMo dw-striding subsampling, T5 relative bias and
 * the Macaron Conformer blocks, with the official masking and > 500-frame chunking behaviour.
 * See shared/spec/PIPELINE.md §3 and the official speech_conformer_encoder.py.
 *
 * Everything is sized from the checkpoint's config.json ("audio_processor" object); nothing assumes
 * the tiny fixture's dims. Weights stay bf16 in the mmap; small vectors (norms, biases, depthwise
 * kernels, the T5 table) are copied to fp32 at load. */
#ifndef PM_CONFORMER_H
#define PM_CONFORMER_H

#include <stdint.h>
#include <jansson.h>

#include "io/safetensors.h"
#include "util/err.h"

/* Length of the chunks a long (subsampled) sequence is cut into: the official code hard-codes it. */
#define PM_CONFORMER_MAX_SEQ 500

/* Activation functions named in the config (get_activation / GLU names of the official code). */
typedef enum pm_cf_act { PM_CF_ACT_SWISH = 0, PM_CF_ACT_SIGMOID, PM_CF_ACT_RELU, PM_CF_ACT_GELU } pm_cf_act;

typedef struct pm_conformer_config {
    int input_size;         /* mel bins fed to the encoder (80) */
    int attention_dim;      /* D */
    int attention_heads;    /* H; D % H == 0 */
    int linear_units;       /* U: feed-forward inner size (the GLU input is 2U) */
    int num_blocks;
    int kernel_size;        /* depthwise conv kernel of the conv module (odd) */
    int causal;             /* 1: the depthwise conv sees only the past (pad k-1, keep the first T) */
    int time_reduction;     /* subsampling factor, a power of two >= 2 */
    int conv_channels;      /* NeMo subsampling channels C */
    int t5_max_distance;    /* relative positions are clamped to [-max, max-1]; table has 2*max rows */
    pm_cf_act ff_act;       /* "activation": gate activation of the feed-forward GLU */
    pm_cf_act conv_act;     /* "conv_activation": after the depthwise-separable conv */
    pm_cf_act conv_glu_act; /* "conv_glu_type": gate activation of the conv module's GLU */
} pm_conformer_config;

/* Parses and validates the encoder section of config.json. `audio_processor` is the
 * "audio_processor" object ({"name": "cascades", "config": {...}}). Absent optional keys take the
 * official constructor defaults; every key the official forward uses is checked, and settings
 * this port does not implement (streaming chunk masks, other input layers, batch norm, ...) are
 * refused with PM_EUNSUPPORTED and a message naming the key. Malformed values: PM_EFORMAT. */
int pm_conformer_config_parse(const json_t *audio_processor, pm_conformer_config *c, pm_err *e);

typedef struct pm_conformer pm_conformer; /* tensor views + small fp32 copies */

/* Fetches every model.embed_tokens_extend.audio_embed.encoder.* tensor with shape checks (marks
 * them consumed) and copies the small ones to fp32. On error *out is NULL and e says which tensor. */
int pm_conformer_load(pm_conformer **out, pm_weights *w, const pm_conformer_config *c, pm_err *e);
void pm_conformer_free(pm_conformer *m);
/* The encoder's output width D (= the audio projections' input). */
int pm_conformer_dim(const pm_conformer *m);
/* Number of subsampled frames for t_max log-mel frames: ceil(t_max / time_reduction). */
int pm_conformer_out_len(const pm_conformer *m, int t_max);

/* Optional capture of intermediates (parity tool, tests). Every pointer may be NULL; when non-NULL
 * on entry (a "want" marker, e.g. from pm_conformer_trace_want_all) the callee replaces it by a
 * malloc()ed, filled buffer, which the caller frees (pm_conformer_trace_free). Fields that were
 * NULL stay NULL; on error every field is NULL again. T' = ceil(Tmax / time_reduction).
 * With T' <= 500 the attention runs on L = T' frames per clip (N = n_clips sequences); with
 * T' > 500 every clip is zero-padded to a multiple of 500 and cut into n_chunks = ceil(T'/500)
 * sequences of L = 500 (N = n_clips * n_chunks, clip-major). t5_bias and hs_mask describe what
 * the blocks see, so they are [H, L, L] and [N, L, L]; the other tensors are per clip. */
typedef struct pm_conformer_trace {
    float *normalized;    /* [n_clips, Tmax, input_size] */
    float *subsample_out; /* [n_clips, T', D] */
    uint8_t *pad_mask;    /* [n_clips, T'] 1 = valid (all 1 without a frame mask) */
    float *t5_bias;       /* [H, L, L] */
    uint8_t *hs_mask;     /* [N, L, L] 1 = key attended */
    float **block_out;    /* array of num_blocks pointers (caller allocates the array), each [n_clips, T', D] */
    float *encoder_out;   /* [n_clips, T', D] */
} pm_conformer_trace;

/* Asks for every intermediate: sets each field to a non-NULL marker (any non-NULL value means
 * "wanted"; it is never dereferenced) and block_out to the caller's array of num_blocks pointers. */
void pm_conformer_trace_want_all(pm_conformer_trace *t, float **block_out);
/* Frees what a forward filled (not the block_out array itself) and NULLs the fields. */
void pm_conformer_trace_free(pm_conformer_trace *t, int num_blocks);

/* Runs the encoder on a batch of clips.
 * feats: [n_clips, t_max, input_size] log-mels, zero-padded past each clip's frames (the model
 *   normalises the padding too, as the official code does); frames[b] in [1, t_max] = valid frames.
 * has_frame_mask: 1 when the processor produced audio_attention_mask (the request had more than
 *   one clip). Then padded frames are masked as keys (pad mask ceil(frames/tr)); 0 = no masking at
 *   all, and a long clip's zero-padded last chunk is attended (official behaviour).
 * out: malloc'd [n_clips, T', D], *t_out = T'. Any length: > 500 subsampled frames are chunked.
 * Errors: PM_EINVAL for bad arguments, PM_ENOMEM. */
int pm_conformer_forward(const pm_conformer *m, const float *feats, int n_clips, int t_max, const int *frames,
                         int has_frame_mask, float **out, int *t_out, pm_conformer_trace *trace, pm_err *e);

#endif
