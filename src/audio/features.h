/* features.h — the official Phi-4-multimodal audio feature extractor (Phi4MMAudioFeatureExtractor):
 * float64 samples at any rate >= 8 kHz -> log-mel features [frames, 80] -> audio_embed_size.
 *
 * Stages (PIPELINE.md §2), with the official dtype flow:
 *   resampling policy  sr > 16000: resample_poly(1, sr / 16000) declared 16 kHz (so 22.05/24 kHz pass
 *                      unchanged and 44.1 kHz becomes 22.05 kHz "at 16 kHz"); 8000 < sr < 16000:
 *                      resample_poly(1, sr / 8000) = unchanged, declared 8 kHz; sr < 8000: error;
 *   framing            16 kHz: window 400, hop 160, n_fft 512; 8 kHz: 200, 80, 256; no centre padding,
 *                      frames = (len - win) / hop + 1, the tail dropped; samples rounded to float32;
 *   per frame (f32)    pre-emphasis y[0] = x[0] - 0.97 x[0], y[j] = x[j] - 0.97 x[j-1], then x 32768;
 *   spectrum           |rfft(hamming(win) (f64) * y, n_fft)| rounded through complex64, magnitude f32;
 *                      8 kHz: bins 0..127 kept, Nyquist dropped, 129 zero bins appended (257 in all);
 *   log-mel            log(max(|S|^2 @ M, 1)) with M = speechlib_mel(16000, 512, 80, fmax 7690).
 * Clips must give at least 2 frames (PM_AUDIO_MIN_FRAMES); pm_audio_min_samples() states the minimum. */
#ifndef PM_AUDIO_FEATURES_H
#define PM_AUDIO_FEATURES_H

#include <stddef.h>
#include <stdint.h>
#include "util/err.h"

#define PM_AUDIO_N_MELS 80
#define PM_AUDIO_N_BINS 257          /* rfft bins of a 512-point transform */
#define PM_AUDIO_MIN_FRAMES 2        /* empty and one-frame clips are refused */
#define PM_AUDIO_COMPRESSION 8       /* audio_compression_rate of the preprocessor config */

typedef struct pm_logmel {
    float *data;           /* [frames, 80] row-major, malloc'd */
    int frames;
    int sample_rate_used;  /* 16000 or 8000: the rate the extractor declared after its policy */
} pm_logmel;

/* The whole extractor for one clip (mono float64 samples at sample_rate). Errors (PM_EINVAL): rate below
 * 8000 Hz, a non-finite sample, a clip too short for 2 frames ("needs at least N samples at R Hz").
 * On failure *out is zeroed. */
int pm_audio_logmel(const double *samples, size_t n, int sample_rate, pm_logmel *out, pm_err *e);
void pm_logmel_free(pm_logmel *m);

/* The extractor's checks of one clip without extracting (rate, finite samples, at least
 * PM_AUDIO_MIN_FRAMES frames), with pm_audio_logmel's messages. */
int pm_audio_check(const double *samples, size_t n, int sample_rate, pm_err *e);

/* audio_embed_size for a clip of `frames` log-mel frames: ceil(frames / 8) (then / 1). */
int pm_audio_embed_size(int frames);

/* Frames the extractor gives for n samples at sample_rate (after its resampling policy); 0 when the
 * rate is unsupported or the clip shorter than one window. */
int pm_audio_num_frames(size_t n, int sample_rate);

/* The fewest samples at sample_rate that give PM_AUDIO_MIN_FRAMES frames (16 kHz: 560, 8 kHz: 280,
 * 48 kHz: 1678); 0 for a rate below 8000 Hz. */
size_t pm_audio_min_samples(int sample_rate);

/* The resampling policy alone: *out (malloc'd, *n_out samples) is what the extractor frames, *sr_used
 * its declared rate (16000 or 8000). Rates below 8000 Hz: PM_EINVAL. */
int pm_audio_resample_policy(const double *samples, size_t n, int sr, double **out, size_t *n_out, int *sr_used, pm_err *e);

/* Magnitude spectrum |S| [frames, 257] (malloc'd *mag) of an already-resampled clip at sample_rate_used
 * (16000 or 8000; 8 kHz zero-filled above bin 127). Same length rule as pm_audio_logmel. */
int pm_audio_magnitude(const double *samples, size_t n, int sample_rate_used, float **mag, int *frames, pm_err *e);

/* speechlib_mel(16000, 512, 80, fmin 0, fmax 7690), transposed: m[bin * 80 + mel], 257 x 80. Computed. */
void pm_mel_matrix(float *m);

/* numpy.hamming(n): the symmetric Hamming window 0.54 + 0.46 cos(pi k / (n - 1)), k = 1-n, 3-n, .., n-1. */
void pm_hamming(double *w, int n);

/* Several clips as one processor call batches them: feats [n, t_max, 80] zero-padded after each clip's
 * frames, mask [n, t_max] (1 = a real frame, i.e. t < frames_b), embed_sizes[n]. All outputs malloc'd
 * except embed_sizes (caller's array of n). */
int pm_audio_batch(const pm_logmel *clips, int n, float **feats, uint8_t **mask, int *t_max, int64_t *embed_sizes, pm_err *e);

#endif
