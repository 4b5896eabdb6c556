/* test_audio_features.c — the audio front-end (src/audio): decoding, resampling, FFT, log-mel.
 *
 * Against the fixture (official outputs, $PHI4MM_FIXTURES/phi4mm-tiny, missing = FAIL): the mel matrix
 * and windows (bit-exact), every clip's resampled waveform, magnitude spectrum and log-mel, frame counts
 * and embed sizes from the manifest, the two-clip batch of case audio2. Without the fixture: the real
 * FFT against a long-double DFT, resample_poly against a direct (non-polyphase) upfirdn, decoding of
 * every WAV sample format libsndfile writes plus FLAC/Ogg, and the refusals (too short, one frame,
 * NaN, low rate, PNG renamed .wav, truncated header, no samples). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audio/features.h"
#include "audio/fft.h"
#include "audio/resample.h"
#include "audio/wave.h"
#include "io/npy.h"
#include "test_util.h"

static char g_fix[1024];

static const char *fix(void) {
    snprintf(g_fix, sizeof g_fix, "%s/phi4mm-tiny", tu_fixtures());
    return g_fix;
}

static pm_npy load_ref(const char *rel) {
    char path[2048];
    snprintf(path, sizeof path, "%s/ref/%s", fix(), rel);
    pm_npy a;
    pm_err e = {0};
    if (pm_npy_load(&a, path, &e)) fail_msg("fixture missing or unreadable: %s", e.msg);
    return a;
}

static json_t *load_manifest(void) {
    char path[2048];
    snprintf(path, sizeof path, "%s/ref/manifest.json", fix());
    json_error_t je;
    json_t *m = json_load_file(path, 0, &je);
    if (!m) fail_msg("fixture manifest unreadable: %s: %s", path, je.text);
    return m;
}

/* max |a - ref| and max |ref| over n elements of a float array. */
static double max_diff_f32(const float *a, const pm_npy *ref, double *max_ref) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < ref->numel; i++) {
        double r = pm_npy_get(ref, i), d = fabs((double)a[i] - r);
        if (d > md) md = d;
        if (fabs(r) > mr) mr = fabs(r);
    }
    if (max_ref) *max_ref = mr;
    return md;
}

static void test_mel_and_windows_exact(void **state) {
    (void)state;
    float m[PM_AUDIO_N_BINS * PM_AUDIO_N_MELS];
    pm_mel_matrix(m);
    pm_npy ref = load_ref("audio/mel_filterbank_257x80.npy");
    assert_int_equal(ref.numel, PM_AUDIO_N_BINS * PM_AUDIO_N_MELS);
    assert_int_equal(ref.shape[0], PM_AUDIO_N_BINS);
    assert_memory_equal(m, ref.data, sizeof m);
    pm_npy_free(&ref);
    /* only bins 1..245 carry weight, each filter peaks below 1 */
    for (int j = 0; j < PM_AUDIO_N_MELS; j++) {
        assert_true(m[j] == 0.0f);
        for (int k = 246; k < PM_AUDIO_N_BINS; k++) assert_true(m[k * PM_AUDIO_N_MELS + j] == 0.0f);
    }
    const int sizes[2] = {400, 200};
    for (int i = 0; i < 2; i++) {
        double w[400];
        float wf[400];
        pm_hamming(w, sizes[i]);
        for (int k = 0; k < sizes[i]; k++) wf[k] = (float)w[k];
        char rel[64];
        snprintf(rel, sizeof rel, "audio/hamming%d.npy", sizes[i]);
        pm_npy h = load_ref(rel);
        assert_int_equal(h.numel, sizes[i]);
        assert_memory_equal(wf, h.data, sizeof(float) * (size_t)sizes[i]);
        pm_npy_free(&h);
        assert_true(w[0] == w[sizes[i] - 1] && fabs(w[0] - 0.08) < 1e-15); /* symmetric */
    }
    double one;
    pm_hamming(&one, 1);
    assert_true(one == 1.0);
}

/* Every clip of the manifest: resampled waveform, magnitude spectrum, log-mel, frames, embed size. */
static void test_clips_match_fixture(void **state) {
    (void)state;
    json_t *man = load_manifest();
    json_t *features = json_object_get(man, "features");
    assert_true(json_object_size(features) >= 5);
    const char *clip;
    json_t *exp;
    json_object_foreach(features, clip, exp) {
        char path[2048], rel[512];
        snprintf(path, sizeof path, "%s/inputs/%s.wav", fix(), clip);
        pm_wave w;
        pm_err e = {0};
        if (pm_wave_read_file(&w, path, &e)) fail_msg("%s", e.msg);
        assert_int_equal(w.n, json_integer_value(json_object_get(exp, "num_samples")));
        assert_int_equal(w.sample_rate, json_integer_value(json_object_get(exp, "sample_rate")));

        double *r;
        size_t nr;
        int used;
        assert_int_equal(pm_audio_resample_policy(w.samples, w.n, w.sample_rate, &r, &nr, &used, &e), PM_OK);
        snprintf(rel, sizeof rel, "audio/%s/resampled_wav.npy", clip);
        snprintf(path, sizeof path, "%s/ref/%s", fix(), rel);
        if (access(path, R_OK) == 0) {
            pm_npy ref = load_ref(rel);
            assert_int_equal(ref.numel, nr);
            double md = 0;
            for (size_t i = 0; i < nr; i++) md = fmax(md, fabs(r[i] - pm_npy_get(&ref, i)));
            print_message("%-14s resampled_wav   max|d| = %.3e\n", clip, md);
            assert_true(md <= 1e-12);
            pm_npy_free(&ref);
        }
        snprintf(rel, sizeof rel, "audio/%s/magnitude_spectrum.npy", clip);
        snprintf(path, sizeof path, "%s/ref/%s", fix(), rel);
        if (access(path, R_OK) == 0) {
            float *mag;
            int frames;
            assert_int_equal(pm_audio_magnitude(r, nr, used, &mag, &frames, &e), PM_OK);
            pm_npy ref = load_ref(rel);
            assert_int_equal(ref.numel, (size_t)frames * PM_AUDIO_N_BINS);
            double mr, md = max_diff_f32(mag, &ref, &mr);
            print_message("%-14s magnitude       max|d| = %.3e (max|ref| %.3g)\n", clip, md, mr);
            assert_true(md <= 1e-5 * mr);
            pm_npy_free(&ref);
            free(mag);
        }
        free(r);

        pm_logmel lm;
        if (pm_audio_logmel(w.samples, w.n, w.sample_rate, &lm, &e)) fail_msg("%s: %s", clip, e.msg);
        assert_int_equal(lm.frames, json_integer_value(json_object_get(exp, "num_frames")));
        assert_int_equal(pm_audio_num_frames(w.n, w.sample_rate), lm.frames);
        assert_int_equal(pm_audio_embed_size(lm.frames), json_integer_value(json_object_get(exp, "audio_embed_size")));
        assert_int_equal(lm.sample_rate_used, w.sample_rate == 8000 ? 8000 : 16000);
        snprintf(rel, sizeof rel, "audio/%s/logmel.npy", clip);
        pm_npy ref = load_ref(rel);
        assert_int_equal(ref.numel, (size_t)lm.frames * PM_AUDIO_N_MELS);
        double md = max_diff_f32(lm.data, &ref, NULL);
        print_message("%-14s logmel          max|d| = %.3e\n", clip, md);
        assert_true(md <= 1e-3);
        pm_npy_free(&ref);
        pm_logmel_free(&lm);
        pm_wave_free(&w);
    }
    json_decref(man);
}

/* ref/audio/batch_ab: the first two clips of case audio2, padded into one batch. */
static void test_batch_matches_fixture(void **state) {
    (void)state;
    json_t *man = load_manifest();
    json_t *clips = json_object_get(json_object_get(json_object_get(man, "cases"), "audio2"), "clips");
    assert_true(json_array_size(clips) >= 2);
    pm_logmel mels[2];
    for (int b = 0; b < 2; b++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/inputs/%s.wav", fix(), json_string_value(json_array_get(clips, (size_t)b)));
        pm_wave w;
        pm_err e = {0};
        if (pm_wave_read_file(&w, path, &e) || pm_audio_logmel(w.samples, w.n, w.sample_rate, &mels[b], &e)) fail_msg("%s", e.msg);
        pm_wave_free(&w);
    }
    float *feats;
    uint8_t *mask;
    int tmax;
    int64_t sizes[2];
    pm_err e = {0};
    assert_int_equal(pm_audio_batch(mels, 2, &feats, &mask, &tmax, sizes, &e), PM_OK);
    pm_npy rf = load_ref("audio/batch_ab/input_audio_embeds.npy"), rs = load_ref("audio/batch_ab/audio_embed_sizes.npy"),
           rm = load_ref("audio/batch_ab/audio_attention_mask.npy");
    assert_int_equal(rf.shape[1], tmax);
    assert_int_equal(rf.numel, (size_t)2 * tmax * PM_AUDIO_N_MELS);
    double md = max_diff_f32(feats, &rf, NULL);
    print_message("batch_ab       input_audio_embeds max|d| = %.3e\n", md);
    assert_true(md <= 1e-3);
    for (int b = 0; b < 2; b++) assert_int_equal(sizes[b], (int64_t)pm_npy_get(&rs, (size_t)b));
    assert_int_equal(rm.numel, (size_t)2 * tmax);
    for (size_t i = 0; i < rm.numel; i++) assert_int_equal(mask[i], (int)pm_npy_get(&rm, i));
    /* padded frames are exactly zero */
    for (int b = 0; b < 2; b++)
        for (int t = mels[b].frames; t < tmax; t++)
            for (int j = 0; j < PM_AUDIO_N_MELS; j++) assert_true(feats[((size_t)b * tmax + t) * PM_AUDIO_N_MELS + j] == 0.0f);
    pm_npy_free(&rf);
    pm_npy_free(&rs);
    pm_npy_free(&rm);
    free(feats);
    free(mask);
    pm_logmel_free(&mels[0]);
    pm_logmel_free(&mels[1]);
    json_decref(man);
}

static uint32_t rng = 2024;
static double drand(void) {
    rng = rng * 1664525u + 1013904223u;
    return ((rng >> 8) / 16777216.0) * 2.0 - 1.0;
}

static void test_rfft_matches_dft(void **state) {
    (void)state;
    const int sizes[] = {4, 8, 64, 256, 512};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        pm_rfft p;
        pm_err e = {0};
        assert_int_equal(pm_rfft_init(&p, n, &e), PM_OK);
        double *x = malloc(sizeof(double) * n), *out = malloc(sizeof(double) * (n + 2));
        for (int i = 0; i < n; i++) x[i] = drand() * 1000.0;
        pm_rfft_forward(&p, x, out);
        double worst = 0, scale = 0;
        for (int k = 0; k <= n / 2; k++) {
            long double re = 0, im = 0;
            for (int j = 0; j < n; j++) {
                long double a = -2.0L * 3.141592653589793238462643383279L * (long double)((long long)j * k % n) / n;
                re += x[j] * cosl(a);
                im += x[j] * sinl(a);
            }
            worst = fmax(worst, fmax(fabs((double)(re - out[2 * k])), fabs((double)(im - out[2 * k + 1]))));
            scale = fmax(scale, (double)sqrtl(re * re + im * im));
        }
        assert_true(worst <= 1e-13 * scale);
        free(x);
        free(out);
        pm_rfft_free(&p);
    }
    pm_rfft p;
    pm_err e = {0};
    assert_int_equal(pm_rfft_init(&p, 400, &e), PM_EINVAL);
}

/* Direct upfirdn (zero-stuff, full convolution, decimate) with the same filter: an independent check
 * of the polyphase indexing, the padding and the output window. */
static void test_resample_matches_direct_upfirdn(void **state) {
    (void)state;
    const int ratios[][2] = {{1, 3}, {1, 2}, {2, 3}, {3, 2}, {1, 6}, {4, 1}, {160, 441}};
    const size_t lens[] = {1, 2, 7, 100, 1001};
    for (size_t q = 0; q < sizeof ratios / sizeof ratios[0]; q++) {
        int up = ratios[q][0], down = ratios[q][1];
        int mr = up > down ? up : down, half = 10 * mr, taps = 2 * half + 1;
        double *h = malloc(sizeof(double) * taps);
        pm_resample_design(h, mr);
        double sum = 0;
        for (int i = 0; i < taps; i++) sum += h[i];
        assert_true(fabs(sum - 1.0) < 1e-12);
        for (int i = 0; i < taps; i++) assert_true(fabs(h[i] - h[taps - 1 - i]) < 1e-17);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t n = lens[li];
            double *x = malloc(sizeof(double) * n);
            for (size_t i = 0; i < n; i++) x[i] = drand();
            double *y;
            size_t ny;
            pm_err e = {0};
            assert_int_equal(pm_resample_poly(x, n, up, down, &y, &ny, &e), PM_OK);
            assert_int_equal(ny, (n * up + down - 1) / down);
            int pre = down - half % down, pre_remove = (half + pre) / down;
            for (size_t j = 0; j < ny; j++) {
                /* output j = sample (j + pre_remove) * down of the up-sampled signal filtered by [0]*pre + h*up */
                long long pos = ((long long)j + pre_remove) * down;
                long double acc = 0;
                for (long long t = 0; t < taps; t++) {
                    long long u = pos - pre - t; /* index into the zero-stuffed input */
                    if (u < 0 || u % up != 0 || u / up >= (long long)n) continue;
                    acc += (long double)h[t] * up * x[u / up];
                }
                assert_true(fabs((double)acc - y[j]) < 1e-13);
            }
            free(x);
            free(y);
        }
        free(h);
    }
    /* gcd reduction and the identity */
    double x[5] = {1, 2, 3, 4, 5}, *y;
    size_t ny;
    pm_err e = {0};
    assert_int_equal(pm_resample_poly(x, 5, 3, 3, &y, &ny, &e), PM_OK);
    assert_int_equal(ny, 5);
    assert_memory_equal(x, y, sizeof x);
    free(y);
    assert_int_equal(pm_resample_poly(x, 5, 0, 3, &y, &ny, &e), PM_EINVAL);
    /* cephes i0 spot values */
    assert_true(fabs(pm_bessel_i0(0.0) - 1.0) < 1e-16);
    assert_true(fabs(pm_bessel_i0(5.0) - 27.239871823604442) < 1e-13);
    assert_true(fabs(pm_bessel_i0(10.0) - 2815.716628466254) < 1e-9);
}

static void test_policy_and_lengths(void **state) {
    (void)state;
    assert_int_equal(pm_audio_min_samples(16000), 560);
    assert_int_equal(pm_audio_min_samples(8000), 280);
    assert_int_equal(pm_audio_min_samples(48000), 1678);
    assert_int_equal(pm_audio_min_samples(44100), 1119);
    assert_int_equal(pm_audio_min_samples(22050), 560);
    assert_int_equal(pm_audio_min_samples(11025), 280);
    assert_int_equal(pm_audio_min_samples(7999), 0);
    assert_int_equal(pm_audio_num_frames(16000, 16000), 98);
    assert_int_equal(pm_audio_embed_size(98), 13);
    assert_int_equal(pm_audio_embed_size(0), 0);
    assert_int_equal(pm_audio_embed_size(1), 1);
    assert_int_equal(pm_audio_embed_size(8), 1);
    assert_int_equal(pm_audio_embed_size(9), 2);
    assert_int_equal(pm_audio_embed_size(4098), 513);
    const struct {
        int sr, used;
        size_t n, n_out;
    } cases[] = {{16000, 16000, 1000, 1000}, {22050, 16000, 1000, 1000}, {24000, 16000, 999, 999},  {44100, 16000, 1001, 501},
                 {48000, 16000, 1000, 334},  {96000, 16000, 1000, 167},  {11025, 8000, 1000, 1000}, {8000, 8000, 10, 10}};
    double *x = calloc(1001, sizeof(double));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double *y;
        size_t ny;
        int used;
        pm_err e = {0};
        assert_int_equal(pm_audio_resample_policy(x, cases[i].n, cases[i].sr, &y, &ny, &used, &e), PM_OK);
        assert_int_equal(used, cases[i].used);
        assert_int_equal(ny, cases[i].n_out);
        free(y);
    }
    double *y;
    size_t ny;
    int used;
    pm_err e = {0};
    assert_int_equal(pm_audio_resample_policy(x, 100, 4000, &y, &ny, &used, &e), PM_EINVAL);
    free(x);
    /* The request plan (engine/prepare.c) counts a clip's tokens with pm_audio_num_frames before
     * any feature is computed and refuses a request whose features then differ: over the rate
     * policy's branches and lengths around its rounding, the count is the extractor's. */
    const int rates[] = {8000, 11025, 15999, 16000, 16001, 22050, 32000, 44100, 48000, 96000};
    double *z = calloc(6000, sizeof(double));
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++)
        for (size_t n = pm_audio_min_samples(rates[r]); n < 6000; n += 97) {
            pm_logmel lm;
            pm_err e2 = {0};
            assert_int_equal(pm_audio_logmel(z, n, rates[r], &lm, &e2), PM_OK);
            if (lm.frames != pm_audio_num_frames(n, rates[r]))
                fail_msg("%zu samples at %d Hz: %d frames, counted %d", n, rates[r], lm.frames, pm_audio_num_frames(n, rates[r]));
            assert_int_equal(pm_audio_check(z, n, rates[r], &e2), PM_OK);
            pm_logmel_free(&lm);
        }
    free(z);
}

/* Too short (0 frames, exactly one frame), NaN, low rate: refused with the minimum stated; the
 * minimum itself is accepted. */
static void test_short_and_bad_clips_refused(void **state) {
    (void)state;
    const int rates[] = {8000, 11025, 16000, 22050, 44100, 48000, 96000};
    double *x = malloc(sizeof(double) * 4000);
    for (int i = 0; i < 4000; i++) x[i] = 0.1 * sin(i * 0.05);
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        size_t need = pm_audio_min_samples(rates[r]);
        assert_true(need > 0 && need < 4000);
        const size_t bad[] = {0, 1, 100, need - 1};
        for (size_t b = 0; b < 4; b++) {
            pm_logmel lm;
            pm_err e = {0};
            assert_int_equal(pm_audio_logmel(x, bad[b], rates[r], &lm, &e), PM_EINVAL);
            char want[128];
            snprintf(want, sizeof want, "needs at least %zu samples at %d Hz", need, rates[r]);
            if (!strstr(e.msg, want)) fail_msg("message '%s' lacks '%s'", e.msg, want);
            assert_null(lm.data);
        }
        pm_logmel lm;
        pm_err e = {0};
        assert_int_equal(pm_audio_logmel(x, need, rates[r], &lm, &e), PM_OK);
        assert_int_equal(lm.frames, 2);
        pm_logmel_free(&lm);
        /* one sample fewer than the minimum gives exactly one frame */
        assert_int_equal(pm_audio_num_frames(need - 1, rates[r]), 1);
    }
    pm_logmel lm;
    pm_err e = {0};
    x[700] = NAN;
    assert_int_equal(pm_audio_logmel(x, 4000, 16000, &lm, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "sample 700"));
    x[700] = 0;
    pm_err_clear(&e);
    assert_int_equal(pm_audio_logmel(x, 4000, 4000, &lm, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "4000 Hz"));
    float *mag;
    int frames;
    pm_err_clear(&e);
    assert_int_equal(pm_audio_magnitude(x, 4000, 22050, &mag, &frames, &e), PM_EINVAL);
    free(x);
}

/* --- decoding --- */

static char g_tmp[256];

static const char *tmpdir(void) {
    if (!g_tmp[0]) {
        snprintf(g_tmp, sizeof g_tmp, "/tmp/pm_test_audio_XXXXXX");
        if (!mkdtemp(g_tmp)) fail_msg("mkdtemp failed");
    }
    return g_tmp;
}

/* Writes frames x channels interleaved doubles with libsndfile in `format`; returns 0 when this
 * libsndfile cannot write it. */
static int write_audio(const char *path, int format, int sr, int ch, const double *data, sf_count_t frames) {
    SF_INFO info = {.samplerate = sr, .channels = ch, .format = format};
    if (!sf_format_check(&info)) return 0;
    SNDFILE *sf = sf_open(path, SFM_WRITE, &info);
    if (!sf) return 0;
    sf_count_t w = sf_writef_double(sf, data, frames);
    sf_close(sf);
    return w == frames;
}

/* Same with int32 samples (libsndfile keeps the top bits for narrower formats and divides by 2^31
 * for float ones, so values k * 2^24 land exactly on every format's grid). */
static int write_audio_int(const char *path, int format, int sr, int ch, const int *data, sf_count_t frames) {
    SF_INFO info = {.samplerate = sr, .channels = ch, .format = format};
    if (!sf_format_check(&info)) return 0;
    SNDFILE *sf = sf_open(path, SFM_WRITE, &info);
    if (!sf) return 0;
    sf_count_t w = sf_writef_int(sf, data, frames);
    sf_close(sf);
    return w == frames;
}

static unsigned char *slurp(const char *path, size_t *len) {
    unsigned char *b = tu_slurp(path, len);
    assert_non_null(b);
    return b;
}

static void test_decode_formats(void **state) {
    (void)state;
    enum { N = 3000 };
    /* values k / 128 (k in -127..127): on every format's grid, so every decoder must return them exactly */
    int *st = malloc(sizeof(int) * N * 2), *mono = malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) {
        st[2 * i] = ((i * 37) % 255 - 127) * (1 << 24);
        st[2 * i + 1] = ((i * 91) % 251 - 125) * (1 << 24);
        mono[i] = st[2 * i];
    }
    const struct {
        const char *name;
        int format;
        double tol;
        int must;
    } fm[] = {
        {"pcm16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 0, 1},    {"pcm24.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_24, 0, 1},
        {"pcm32.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_32, 0, 1},    {"u8.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 0, 1},
        {"float.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 0, 1},     {"double.wav", SF_FORMAT_WAV | SF_FORMAT_DOUBLE, 0, 1},
        {"pcm16.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 0, 1},  {"vorbis.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 0.5, 1},
        {"pcm16.aiff", SF_FORMAT_AIFF | SF_FORMAT_PCM_16, 0, 1},  {"layer3.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 0.5, 0},
    };
    for (size_t f = 0; f < sizeof fm / sizeof fm[0]; f++) {
        for (int ch = 1; ch <= 2; ch++) {
            char path[512];
            snprintf(path, sizeof path, "%s/%d_%s", tmpdir(), ch, fm[f].name);
            int sub = fm[f].format & SF_FORMAT_SUBMASK, ok;
            if (sub == SF_FORMAT_FLOAT || sub == SF_FORMAT_DOUBLE) { /* int writes are not scaled for float files */
                double *d = malloc(sizeof(double) * N * 2);
                for (int i = 0; i < N * ch; i++) d[i] = ((ch == 1 ? mono : st)[i] >> 24) / 128.0;
                ok = write_audio(path, fm[f].format, 16000, ch, d, N);
                free(d);
            } else {
                ok = write_audio_int(path, fm[f].format, 16000, ch, ch == 1 ? mono : st, N);
            }
            if (!ok) {
                if (fm[f].must) fail_msg("libsndfile cannot write %s", fm[f].name);
                print_message("libsndfile here cannot write %s: its decoding is not checked\n", fm[f].name);
                continue;
            }
            pm_wave w;
            pm_err e = {0};
            if (pm_wave_read_file(&w, path, &e)) fail_msg("%s", e.msg);
            assert_int_equal(w.sample_rate, 16000);
            if (fm[f].tol == 0) {
                assert_int_equal(w.n, N);
                for (int i = 0; i < N; i++) {
                    double a = (st[2 * i] >> 24) / 128.0, b = (st[2 * i + 1] >> 24) / 128.0;
                    double want = ch == 1 ? a : (a + b) / 2.0;
                    if (w.samples[i] != want) fail_msg("%s ch=%d sample %d: %.17g != %.17g", fm[f].name, ch, i, w.samples[i], want);
                }
            } else {
                /* lossy: the right length (codec priming aside) and a bounded error */
                assert_true(w.n >= N - 1200 && w.n <= N + 2400);
            }
            /* the same bytes through the in-memory path */
            size_t len;
            unsigned char *bytes = slurp(path, &len);
            pm_wave m;
            if (pm_wave_read_memory(&m, bytes, len, "upload", &e)) fail_msg("%s", e.msg);
            assert_int_equal(m.n, w.n);
            assert_memory_equal(m.samples, w.samples, sizeof(double) * w.n);
            pm_wave_free(&m);
            pm_wave_free(&w);
            free(bytes);
            unlink(path);
        }
    }
    free(st);
    free(mono);
}

static void expect_read_error(const char *path, int code, const char *needle) {
    pm_wave w;
    pm_err e = {0};
    int rc = pm_wave_read_file(&w, path, &e);
    if (rc != code) fail_msg("%s: expected %d, got %d (%s)", path, code, rc, e.msg);
    if (!strstr(e.msg, needle)) fail_msg("%s: message '%s' lacks '%s'", path, e.msg, needle);
    if (!strstr(e.msg, path)) fail_msg("message '%s' does not name the file", e.msg);
    assert_null(w.samples);
}

static void test_decode_errors(void **state) {
    (void)state;
    char path[512];
    double tone[1000];
    for (int i = 0; i < 1000; i++) tone[i] = 0.5 * sin(i * 0.1);
    /* a PNG renamed .wav */
    static const unsigned char png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                                        0,    0,   1,   0,   0,    0,    1,    0,    8, 2, 0, 0,  0,   0,   0,   0};
    snprintf(path, sizeof path, "%s/image.wav", tmpdir());
    FILE *f = fopen(path, "wb");
    fwrite(png, 1, sizeof png, f);
    fclose(f);
    expect_read_error(path, PM_EFORMAT, "not a readable audio file");
    pm_wave w;
    pm_err e = {0};
    assert_int_equal(pm_wave_read_memory(&w, png, sizeof png, "body.wav", &e), PM_EFORMAT);
    assert_non_null(strstr(e.msg, "body.wav"));
    /* truncated header: the first 30 bytes of a valid WAV */
    snprintf(path, sizeof path, "%s/full.wav", tmpdir());
    assert_true(write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, tone, 1000));
    size_t len;
    unsigned char *bytes = slurp(path, &len);
    snprintf(path, sizeof path, "%s/truncated.wav", tmpdir());
    f = fopen(path, "wb");
    fwrite(bytes, 1, 30, f);
    fclose(f);
    expect_read_error(path, PM_EFORMAT, "not a readable audio file");
    /* truncated data (header intact, half the samples): decodes what is there */
    f = fopen(path, "wb");
    fwrite(bytes, 1, len - 1000, f);
    fclose(f);
    pm_err_clear(&e);
    assert_int_equal(pm_wave_read_file(&w, path, &e), PM_OK);
    assert_int_equal(w.n, 500);
    pm_wave_free(&w);
    free(bytes);
    /* a valid header with no samples */
    snprintf(path, sizeof path, "%s/empty.wav", tmpdir());
    assert_true(write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, tone, 0));
    expect_read_error(path, PM_EINVAL, "no samples");
    /* a 0-byte file and a missing one */
    snprintf(path, sizeof path, "%s/zero.wav", tmpdir());
    fclose(fopen(path, "wb"));
    expect_read_error(path, PM_EINVAL, "empty");
    snprintf(path, sizeof path, "%s/missing.wav", tmpdir());
    expect_read_error(path, PM_EIO, "cannot open");
    /* NaN and infinite float samples */
    tone[123] = NAN;
    snprintf(path, sizeof path, "%s/nan.wav", tmpdir());
    assert_true(write_audio(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, tone, 1000));
    expect_read_error(path, PM_EINVAL, "sample 123 is NaN");
    tone[123] = INFINITY;
    assert_true(write_audio(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, tone, 1000));
    expect_read_error(path, PM_EINVAL, "infinite");
    tone[123] = 0;
    /* 4 kHz */
    snprintf(path, sizeof path, "%s/low.wav", tmpdir());
    assert_true(write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 4000, 1, tone, 1000));
    expect_read_error(path, PM_EINVAL, "below the supported minimum of 8000 Hz");
    /* 100 samples decode fine but are refused by the extractor with the minimum stated */
    snprintf(path, sizeof path, "%s/short.wav", tmpdir());
    assert_true(write_audio(path, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, tone, 100));
    pm_err_clear(&e);
    assert_int_equal(pm_wave_read_file(&w, path, &e), PM_OK);
    pm_logmel lm;
    assert_int_equal(pm_audio_logmel(w.samples, w.n, w.sample_rate, &lm, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "needs at least 560 samples at 16000 Hz"));
    pm_wave_free(&w);
    assert_int_equal(pm_wave_read_memory(&w, "", 0, "empty upload", &e), PM_EINVAL);
}

static int teardown_tmp(void **state) {
    (void)state;
    if (g_tmp[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0) return 0;
    }
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mel_and_windows_exact),
        cmocka_unit_test(test_clips_match_fixture),
        cmocka_unit_test(test_batch_matches_fixture),
        cmocka_unit_test(test_rfft_matches_dft),
        cmocka_unit_test(test_resample_matches_direct_upfirdn),
        cmocka_unit_test(test_policy_and_lengths),
        cmocka_unit_test(test_short_and_bad_clips_refused),
        cmocka_unit_test(test_decode_formats),
        cmocka_unit_test(test_decode_errors),
    };
    return cmocka_run_group_tests(tests, NULL, teardown_tmp);
}
