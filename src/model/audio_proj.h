/* audio_proj.h — the two audio projections of Phi-4-multimodal
 * (`audio_embed.audio_projection.{speech,vision}`): Linear(D_audio, H) -> GELU(erf) -> Linear(H, H).
 * The speech branch is used for audio-only requests, the vision branch when the request also has
 * an image (PIPELINE.md §3.7). Both are loaded, so every checkpoint tensor is consumed. */
#ifndef PM_AUDIO_PROJ_H
#define PM_AUDIO_PROJ_H

#include "io/safetensors.h"
#include "util/err.h"

enum { PM_AUDIO_PROJ_SPEECH = 0, PM_AUDIO_PROJ_VISION = 1 };

typedef struct pm_audio_proj pm_audio_proj;

/* Fetches `.speech.{0,2}` and `.vision.{0,2}` weights and biases with shape checks
 * ([hidden, d_audio], [hidden], [hidden, hidden], [hidden]). */
int pm_audio_proj_load(pm_audio_proj **out, pm_weights *w, int d_audio, int hidden, pm_err *e);
void pm_audio_proj_free(pm_audio_proj *p);

/* y[n, hidden] = Linear2(GELU_erf(Linear1(x[n, d_audio]))); branch PM_AUDIO_PROJ_SPEECH or _VISION.
 * n == 0 is a no-op. Errors: PM_EINVAL (bad branch or n), PM_ENOMEM. */
int pm_audio_proj_forward(const pm_audio_proj *p, int branch, const float *x, int n, float *y, pm_err *e);

#endif
