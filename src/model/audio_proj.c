/* audio_proj.c — see audio_proj.h. Weights stay bf16 in the mmap; biases are fp32 copies. */
#include "audio_proj.h"

#include <stdlib.h>

#include "nn/ops.h"

#define PFX "model.embed_tokens_extend.audio_embed.audio_projection."

typedef struct branch {
    const pm_tensor *w1, *w2; /* [H, Da], [H, H] */
    float *b1, *b2;           /* [H] */
} branch;

struct pm_audio_proj {
    int d_audio, hidden;
    branch br[2];
};

static const char *const branch_name[2] = {"speech", "vision"};

void pm_audio_proj_free(pm_audio_proj *p) {
    if (!p) return;
    for (int i = 0; i < 2; i++) {
        free(p->br[i].b1);
        free(p->br[i].b2);
    }
    free(p);
}

int pm_audio_proj_load(pm_audio_proj **out, pm_weights *w, int d_audio, int hidden, pm_err *e) {
    *out = NULL;
    if (e->code) return e->code;
    if (d_audio < 1 || hidden < 1) return pm_errf(e, PM_EINVAL, "audio projection: bad dims %d -> %d", d_audio, hidden);
    pm_audio_proj *p = pm_calloc(1, sizeof *p, e);
    if (!p) return e->code;
    p->d_audio = d_audio;
    p->hidden = hidden;
    for (int i = 0; i < 2; i++) {
        const char *n = branch_name[i];
        branch *b = &p->br[i];
        b->w1 = pm_wget(w, e, 2, (int64_t[]){hidden, d_audio}, PFX "%s.0.weight", n);
        b->b1 = pm_tensor_f32_copy(pm_wget(w, e, 1, (int64_t[]){hidden}, PFX "%s.0.bias", n), e);
        b->w2 = pm_wget(w, e, 2, (int64_t[]){hidden, hidden}, PFX "%s.2.weight", n);
        b->b2 = pm_tensor_f32_copy(pm_wget(w, e, 1, (int64_t[]){hidden}, PFX "%s.2.bias", n), e);
    }
    if (e->code) {
        pm_audio_proj_free(p);
        return e->code;
    }
    *out = p;
    return PM_OK;
}

int pm_audio_proj_forward(const pm_audio_proj *p, int branch_id, const float *x, int n, float *y, pm_err *e) {
    if (branch_id != PM_AUDIO_PROJ_SPEECH && branch_id != PM_AUDIO_PROJ_VISION)
        return pm_errf(e, PM_EINVAL, "audio projection: unknown branch %d", branch_id);
    if (n < 0) return pm_errf(e, PM_EINVAL, "audio projection: negative row count %d", n);
    if (n == 0) return PM_OK;
    const branch *b = &p->br[branch_id];
    int H = p->hidden;
    float *t = pm_malloc((size_t)n * H * sizeof(float), e);
    if (!t) return e->code;
    pm_linear(t, x, n, b->w1, NULL);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++)
        for (int j = 0; j < H; j++) t[(size_t)r * H + j] = pm_gelu_erf(t[(size_t)r * H + j] + b->b1[j]);
    pm_linear(y, t, n, b->w2, NULL);
    for (int r = 0; r < n; r++)
        for (int j = 0; j < H; j++) y[(size_t)r * H + j] += b->b2[j];
    free(t);
    return PM_OK;
}
