/* conformer_internal.h — the loaded Conformer shared by conformer.c (load, forward driver),
 * conformer_subsample.c (NeMo dw-striding) and conformer_block.c (Macaron blocks). Not public.
 *
 * Big matrices are pm_tensor views into the mmap (reshaped to 2-D [out, in] where the checkpoint
 * stores conv kernels as [out, in, 1] or [out, in, 1, 1]); vectors and 3x3 / depthwise kernels are
 * fp32 copies, kernels transposed to [tap][channel] so inner loops run over contiguous channels. */
#ifndef PM_CONFORMER_INTERNAL_H
#define PM_CONFORMER_INTERNAL_H

#include <math.h>

#include "conformer.h"
#include "nn/ops.h"

#define PM_CF_LN_EPS 1e-5f

typedef struct pm_cf_ff {     /* FeedForward: LN -> Linear(D, 2U) -> a*act(g) -> Linear(U, D) */
    float *ln_w, *ln_b;
    pm_tensor w1, w2;         /* [2U, D], [D, U] */
    float *b1, *b2;           /* [2U], [D] */
} pm_cf_ff;

typedef struct pm_cf_block {
    pm_cf_ff ff_in, ff_out;
    float *ln_att_w, *ln_att_b;
    pm_tensor wq, wk, wv, wo; /* [D, D] */
    float *bq, *bk, *bv, *bo;
    float *conv_ln_w, *conv_ln_b;
    pm_tensor glu_w;          /* [2D, D] pointwise conv before the GLU */
    float *glu_bias;          /* [2D] its bias */
    float *glu_b1, *glu_b2;   /* [D] additive GLU biases */
    float *dw_w;              /* [k][D] depthwise kernel, tap-major */
    float *dw_b;              /* [D] */
    pm_tensor pw_w;           /* [D, D] */
    float *pw_b;
    pm_tensor ext_w;          /* [D, D] */
    float *ext_b;
    float *ln_w, *ln_b;       /* the block's final LayerNorm */
} pm_cf_block;

typedef struct pm_cf_packs pm_cf_packs;

typedef struct pm_cf_stage {  /* one dw-striding stage after the first conv */
    float *dw_w;              /* [9][C] depthwise 3x3, tap-major */
    float *dw_b;              /* [C] */
    pm_tensor pw_w;           /* [C, C] 1x1 conv */
    float *pw_b;              /* [C] */
} pm_cf_stage;

struct pm_conformer {
    pm_conformer_config c;
    int n_stages;             /* log2(time_reduction): conv0 + (n_stages - 1) dw stages */
    int freq_out;             /* mel axis after subsampling (80 -> 10 for x8) */
    float *mean, *invstd;     /* [input_size] */
    float *conv0_w, *conv0_b; /* [9][C], [C] */
    pm_cf_stage *stages;      /* n_stages - 1 */
    pm_tensor out_w;          /* [D, C * freq_out] */
    float *out_b;             /* [D] */
    float *t5;                /* [H][2 * max_distance]: bias of head h for index rel + max_distance */
    pm_cf_block *blocks;      /* num_blocks */
    pm_cf_packs *packs;       /* the matrices' GEMM-ready copies, made by the second forward */
};

/* conformer_pack.c. _new at load (no copies yet); _ensure at the start of every forward (the second
 * makes them, thread-safe); _free before the blocks go. */
int pm_cf_packs_new(pm_conformer *m, const pm_weights *w, pm_err *e);
void pm_cf_packs_ensure(const pm_conformer *m);
void pm_cf_packs_free(pm_conformer *m);

/* Scratch for running a group of G sequences of L frames (R = G*L rows) through the blocks. */
typedef struct pm_cf_work {
    int rows;                 /* R the buffers are sized for */
    int L;
    float *h, *q, *k, *v;     /* [R, D] */
    float *qt, *kt, *vt;      /* [G, H, L, dk] per-head copies */
    float *att;               /* [R, D] */
    float *big;               /* [R, 2 * max(U, D)] */
    float *mid;               /* [R, max(U, D)] */
    float *scratch;           /* n_threads * per_thread (pm_cf_attn_scratch) */
    size_t per_thread;
    int n_threads;
} pm_cf_work;

static inline float pm_cf_apply(pm_cf_act a, float x) {
    switch (a) {
    case PM_CF_ACT_SWISH: return x * (1.0f / (1.0f + expf(-x)));
    case PM_CF_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case PM_CF_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case PM_CF_ACT_GELU: return pm_gelu_erf(x);
    }
    return x;
}

int pm_cf_work_init(pm_cf_work *w, const pm_conformer *m, int rows, int L, pm_err *e);
void pm_cf_work_free(pm_cf_work *w);
/* Floats of attention scratch per thread for sequences of L frames and head width dk. */
size_t pm_cf_attn_scratch(int L, int dk);

/* Subsamples one clip: xn [t_max, input_size] (normalised) -> out [ceil(t_max/tr), D]. */
int pm_cf_subsample(const pm_conformer *m, const float *xn, int t_max, float *out, pm_err *e);

/* One Conformer block, in place on x [G*L, D] (G sequences of L frames, each its own attention and
 * conv context). kv_len[s]: keys 0..kv_len[s]-1 of sequence s are attended (0: none, the output
 * of attention is then zero as the official masked softmax gives). */
void pm_cf_block_forward(const pm_conformer *m, const pm_cf_block *b, float *x, int G, int L, const int *kv_len, pm_cf_work *w);

/* T5 relative bias of head h between query i and key j. */
static inline float pm_cf_t5(const pm_conformer *m, int h, int i, int j) {
    int md = m->c.t5_max_distance, rel = j - i;
    if (rel < -md) rel = -md;
    if (rel > md - 1) rel = md - 1;
    return m->t5[(size_t)h * 2 * md + rel + md];
}

#endif
