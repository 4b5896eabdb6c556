/* features.c — the log-mel extractor of Phi-4-multimodal (see features.h for the stages).
 *
 * Design: a small per-call context (stft_ctx) holds the window, the FFT plan and the mel rows; each
 * frame goes samples -> float32 frame -> pre-emphasis -> windowed float64 buffer -> rfft -> complex64
 * -> magnitude, then either is stored (pm_audio_magnitude) or folded straight into 80 mel energies
 * (pm_audio_logmel), so a 30-minute clip never holds its whole spectrogram. The mel matrix is built
 * from its definition at every call (257x80, microseconds) and applied sparsely: each filter covers a
 * contiguous run of bins. Mel energies are accumulated in double and rounded once to float32 (the
 * reference's float32 matmul rounds along the way: differences are far below the 1e-3 tolerance). */
#include "audio/features.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "audio/fft.h"
#include "audio/resample.h"

#define PREEMPHASIS 0.97f

/* Frame geometry at a declared rate. */
typedef struct stft_geom {
    int n_fft, win, hop;
} stft_geom;

static stft_geom geom_for(int sr_used) {
    stft_geom g = {512, 400, 160};
    if (sr_used == 8000) g = (stft_geom){256, 200, 80};
    return g;
}

/* Decimation factor of the policy and the declared rate; 0 for an unsupported rate. */
static int policy_factor(int sr, int *sr_used) {
    if (sr > 16000) {
        *sr_used = 16000;
        return sr / 16000;
    }
    if (sr == 16000) {
        *sr_used = 16000;
        return 1;
    }
    if (sr >= 8000) { /* 8000 <= sr < 16000: sr / 8000 is 1, i.e. no resampling */
        *sr_used = 8000;
        return sr / 8000;
    }
    *sr_used = 0;
    return 0;
}

static int frames_for_len(size_t len, stft_geom g) {
    if (len < (size_t)g.win) return 0;
    size_t f = (len - (size_t)g.win) / (size_t)g.hop + 1;
    return f > (size_t)INT32_MAX ? INT32_MAX : (int)f;
}

int pm_audio_num_frames(size_t n, int sample_rate) {
    int used, d = policy_factor(sample_rate, &used);
    if (d == 0) return 0;
    size_t len = d == 1 ? n : n / (size_t)d + (n % (size_t)d != 0);
    return frames_for_len(len, geom_for(used));
}

size_t pm_audio_min_samples(int sample_rate) {
    int used, d = policy_factor(sample_rate, &used);
    if (d == 0) return 0;
    stft_geom g = geom_for(used);
    size_t need = (size_t)g.win + (size_t)g.hop * (PM_AUDIO_MIN_FRAMES - 1);
    /* ceil(n / d) >= need  <=>  n >= (need - 1) * d + 1 */
    return d == 1 ? need : (need - 1) * (size_t)d + 1;
}

int pm_audio_embed_size(int frames) {
    if (frames <= 0) return 0;
    int r = frames / PM_AUDIO_COMPRESSION + (frames % PM_AUDIO_COMPRESSION != 0);
    return r; /* the second stage divides by audio_downsample_rate = 1 */
}

void pm_hamming(double *w, int n) {
    if (n <= 0) return;
    if (n == 1) {
        w[0] = 1.0;
        return;
    }
    for (int i = 0; i < n; i++) {
        double k = (double)(1 - n + 2 * i);
        w[i] = 0.54 + 0.46 * cos(M_PI * k / (double)(n - 1));
    }
}

/* The speechlib mel scale: 1127 ln(1 + f / 700). */
static double mel_of_hz(double f) { return 1127.0 * log(1.0 + f / 700.0); }

void pm_mel_matrix(float *m) {
    const int sr = 16000, n_fft = 512, n_mels = PM_AUDIO_N_MELS, bins = PM_AUDIO_N_BINS;
    const double fmin = 0.0, fmax = 7690.0;
    memset(m, 0, sizeof(float) * (size_t)bins * (size_t)n_mels);
    /* FFT bins strictly inside (f2bin(fmin), f2bin(fmax)), f2bin(f) = int(f * n_fft / sr + 0.5) */
    int klo = (int)(fmin * n_fft / sr + 0.5) + 1, khi = (int)(fmax * n_fft / sr + 0.5);
    if (khi < klo) khi = klo;
    double mlo = mel_of_hz(fmin), mhi = mel_of_hz(fmax);
    /* n_mels + 2 centres evenly spaced in mel, as numpy.linspace computes them (i * step + start,
     * the last one exactly mhi); ms is the spacing. */
    double centres[PM_AUDIO_N_MELS + 2];
    double step = (mhi - mlo) / (n_mels + 1);
    for (int i = 0; i < n_mels + 2; i++) centres[i] = (double)i * step + mlo;
    centres[n_mels + 1] = mhi;
    double ms = (mhi - mlo) / (n_mels + 1);
    for (int j = 0; j < n_mels; j++) {
        double left = centres[j], centre = centres[j + 1], right = centres[j + 2];
        for (int k = klo; k < khi; k++) {
            double mb = 1127.0 * log(1.0 + (double)(k * sr) / (n_fft * 700.0));
            if (left < mb && mb < right) m[(size_t)k * n_mels + j] = (float)(1.0 - fabs(centre - mb) / ms);
        }
    }
}

/* Per-call state of the STFT. */
typedef struct stft_ctx {
    stft_geom g;
    int sr_used;
    double window[400];
    double fin[512], fout[2 * 257];
    float frame[400];
    pm_rfft fft;
} stft_ctx;

static int stft_init(stft_ctx *c, int sr_used, pm_err *e) {
    c->sr_used = sr_used;
    c->g = geom_for(sr_used);
    pm_hamming(c->window, c->g.win);
    return pm_rfft_init(&c->fft, c->g.n_fft, e);
}

/* |S| of the frame starting at s (win samples available) into mag[257]. */
static void stft_frame(stft_ctx *c, const double *s, float *mag) {
    const stft_geom g = c->g;
    float *f = c->frame;
    for (int j = 0; j < g.win; j++) f[j] = (float)s[j];
    /* pre-emphasis in float32, the first sample against itself, then the int16 scale */
    for (int j = 0; j < g.win; j++) {
        float prev = f[j > 0 ? j - 1 : 0];
        float scaled = PREEMPHASIS * prev;
        float diff = f[j] - scaled;
        c->fin[j] = c->window[j] * (double)(diff * 32768.0f);
    }
    for (int j = g.win; j < g.n_fft; j++) c->fin[j] = 0.0;
    pm_rfft_forward(&c->fft, c->fin, c->fout);
    if (c->sr_used == 16000) {
        for (int k = 0; k < PM_AUDIO_N_BINS; k++) mag[k] = hypotf((float)c->fout[2 * k], (float)c->fout[2 * k + 1]);
    } else {
        /* The 8 kHz spectrum is widened to complex128 by the zero padding: magnitude in double. */
        int keep = g.n_fft / 2; /* bins 0..127; the Nyquist bin is dropped */
        for (int k = 0; k < keep; k++) {
            float re = (float)c->fout[2 * k], im = (float)c->fout[2 * k + 1];
            mag[k] = (float)hypot((double)re, (double)im);
        }
        for (int k = keep; k < PM_AUDIO_N_BINS; k++) mag[k] = 0.0f;
    }
}

static int check_input(const double *samples, size_t n, int sample_rate, int *sr_used, pm_err *e) {
    if (policy_factor(sample_rate, sr_used) == 0)
        return pm_errf(e, PM_EINVAL, "audio: sample rate %d Hz is not supported (the minimum is 8000 Hz)", sample_rate);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(samples[i])) return pm_errf(e, PM_EINVAL, "audio: sample %zu is not a finite number", i);
    int frames = pm_audio_num_frames(n, sample_rate);
    if (frames < PM_AUDIO_MIN_FRAMES)
        return pm_errf(e, PM_EINVAL,
                       "audio too short: %zu samples at %d Hz give %d feature frame%s; needs at least %zu samples at %d Hz "
                       "(%d frames: one 25 ms window plus a 10 ms hop)",
                       n, sample_rate, frames, frames == 1 ? "" : "s", pm_audio_min_samples(sample_rate), sample_rate,
                       PM_AUDIO_MIN_FRAMES);
    return PM_OK;
}

int pm_audio_check(const double *samples, size_t n, int sample_rate, pm_err *e) {
    int used;
    return check_input(samples, n, sample_rate, &used, e);
}

int pm_audio_resample_policy(const double *samples, size_t n, int sr, double **out, size_t *n_out, int *sr_used, pm_err *e) {
    *out = NULL;
    *n_out = 0;
    int d = policy_factor(sr, sr_used);
    if (d == 0) return pm_errf(e, PM_EINVAL, "audio: sample rate %d Hz is not supported (the minimum is 8000 Hz)", sr);
    return pm_resample_poly(samples, n, 1, d, out, n_out, e);
}

int pm_audio_magnitude(const double *samples, size_t n, int sample_rate_used, float **mag, int *frames, pm_err *e) {
    *mag = NULL;
    *frames = 0;
    if (sample_rate_used != 16000 && sample_rate_used != 8000)
        return pm_errf(e, PM_EINVAL, "audio: the spectrum needs 16000 or 8000 Hz samples, got %d Hz", sample_rate_used);
    int used;
    int rc = check_input(samples, n, sample_rate_used, &used, e);
    if (rc) return rc;
    stft_ctx c;
    if ((rc = stft_init(&c, sample_rate_used, e))) return rc;
    int nf = frames_for_len(n, c.g);
    float *m = pm_malloc(pm_mul_size((size_t)nf, PM_AUDIO_N_BINS * sizeof(float)), e);
    if (!m) {
        pm_rfft_free(&c.fft);
        return e->code;
    }
    for (int t = 0; t < nf; t++) stft_frame(&c, samples + (size_t)t * (size_t)c.g.hop, m + (size_t)t * PM_AUDIO_N_BINS);
    pm_rfft_free(&c.fft);
    *mag = m;
    *frames = nf;
    return PM_OK;
}

int pm_audio_logmel(const double *samples, size_t n, int sample_rate, pm_logmel *out, pm_err *e) {
    memset(out, 0, sizeof *out);
    int used;
    int rc = check_input(samples, n, sample_rate, &used, e);
    if (rc) return rc;
    double *wav;
    size_t len;
    if ((rc = pm_audio_resample_policy(samples, n, sample_rate, &wav, &len, &used, e))) return rc;
    stft_ctx c;
    if ((rc = stft_init(&c, used, e))) {
        free(wav);
        return rc;
    }
    int nf = frames_for_len(len, c.g);
    float *mel = pm_malloc(sizeof(float) * PM_AUDIO_N_BINS * PM_AUDIO_N_MELS, e);
    float *feat = pm_malloc(pm_mul_size((size_t)nf, PM_AUDIO_N_MELS * sizeof(float)), e);
    if (!mel || !feat) {
        free(mel);
        free(feat);
        free(wav);
        pm_rfft_free(&c.fft);
        return e->code;
    }
    pm_mel_matrix(mel);
    /* Each filter's non-zero bins form one run [lo[j], hi[j]). */
    int lo[PM_AUDIO_N_MELS], hi[PM_AUDIO_N_MELS];
    for (int j = 0; j < PM_AUDIO_N_MELS; j++) {
        lo[j] = PM_AUDIO_N_BINS;
        hi[j] = 0;
        for (int k = 0; k < PM_AUDIO_N_BINS; k++)
            if (mel[(size_t)k * PM_AUDIO_N_MELS + j] != 0.0f) {
                if (k < lo[j]) lo[j] = k;
                hi[j] = k + 1;
            }
    }
    float mag[PM_AUDIO_N_BINS], power[PM_AUDIO_N_BINS];
    for (int t = 0; t < nf; t++) {
        stft_frame(&c, wav + (size_t)t * (size_t)c.g.hop, mag);
        for (int k = 0; k < PM_AUDIO_N_BINS; k++) power[k] = mag[k] * mag[k];
        float *row = feat + (size_t)t * PM_AUDIO_N_MELS;
        for (int j = 0; j < PM_AUDIO_N_MELS; j++) {
            double acc = 0.0;
            for (int k = lo[j]; k < hi[j]; k++) acc += (double)power[k] * (double)mel[(size_t)k * PM_AUDIO_N_MELS + j];
            float v = (float)acc;
            row[j] = logf(v < 1.0f ? 1.0f : v);
        }
    }
    free(mel);
    free(wav);
    pm_rfft_free(&c.fft);
    /* Finite samples can still overflow the float32 power spectrum (|x| beyond ~1e13, e.g. a float
     * file holding 1e38): refuse rather than hand NaN/inf features to the model. */
    for (size_t i = 0; i < (size_t)nf * PM_AUDIO_N_MELS; i++)
        if (!isfinite(feat[i])) {
            free(feat);
            return pm_errf(e, PM_EINVAL, "audio: log-mel frame %zu is not finite: sample magnitudes are far outside [-1, 1]",
                           i / PM_AUDIO_N_MELS);
        }
    out->data = feat;
    out->frames = nf;
    out->sample_rate_used = used;
    return PM_OK;
}

void pm_logmel_free(pm_logmel *m) {
    if (!m) return;
    free(m->data);
    m->data = NULL;
    m->frames = 0;
}

int pm_audio_batch(const pm_logmel *clips, int n, float **feats, uint8_t **mask, int *t_max, int64_t *embed_sizes, pm_err *e) {
    *feats = NULL;
    *mask = NULL;
    *t_max = 0;
    if (n <= 0) return pm_errf(e, PM_EINVAL, "audio batch: no clips");
    int tm = 0;
    for (int b = 0; b < n; b++)
        if (clips[b].frames > tm) tm = clips[b].frames;
    size_t row = (size_t)tm * PM_AUDIO_N_MELS;
    float *f = pm_calloc(pm_mul_size((size_t)n, row), sizeof(float), e);
    uint8_t *mk = pm_calloc(pm_mul_size((size_t)n, (size_t)tm), 1, e);
    if (!f || !mk) {
        free(f);
        free(mk);
        return e->code;
    }
    for (int b = 0; b < n; b++) {
        memcpy(f + (size_t)b * row, clips[b].data, sizeof(float) * (size_t)clips[b].frames * PM_AUDIO_N_MELS);
        memset(mk + (size_t)b * (size_t)tm, 1, (size_t)clips[b].frames);
        embed_sizes[b] = pm_audio_embed_size(clips[b].frames);
    }
    *feats = f;
    *mask = mk;
    *t_max = tm;
    return PM_OK;
}
