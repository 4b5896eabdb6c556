/* parity_features.c — the pseudo-case "features" of `phi4mm parity`: the audio front-end against
 * everything under ref/audio/ except the long clip's encoder output and projection (the encoder's
 * runner checks those).
 *
 * For every clip named in ref/manifest.json "features" (its file from inputs/inputs.json "clips", else
 * inputs/<clip>.wav) it decodes the file as the engine does and checks, when the reference exists:
 * resampled_wav (policy output, float64, abs 1e-12), magnitude_spectrum (rel 1e-5 of max|ref|), logmel
 * (abs 1e-3), and the frame count / audio_embed_size against the manifest. Then the computed mel matrix
 * and Hamming windows, and ref/audio/batch_ab: the first two clips of case "audio2" zero-padded into one
 * batch with their embed sizes and frame mask. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/features.h"
#include "audio/wave.h"
#include "parity.h"

#define CASE "features"

/* Everything the checks need about one clip. */
typedef struct clip_run {
    pm_wave wave;
    pm_logmel mel;
    double *resampled;
    size_t n_resampled;
    int sr_used;
    float *mag;
    int mag_frames;
    char err[1100];   /* empty when every stage was computed */
} clip_run;

static void clip_free(clip_run *c) {
    pm_wave_free(&c->wave);
    pm_logmel_free(&c->mel);
    free(c->resampled);
    free(c->mag);
    memset(c, 0, sizeof *c);
}

/* Path of a clip's audio file: inputs.json's "file" when listed, else <clip>.wav; -1 when it does
 * not fit in out. */
static int clip_path(const pm_parity *p, json_t *inputs, const char *clip, char *out, size_t cap) {
    const char *file = NULL;
    json_t *c = inputs ? json_object_get(json_object_get(inputs, "clips"), clip) : NULL;
    if (c) file = json_string_value(json_object_get(c, "file"));
    int len = file ? snprintf(out, cap, "%s/inputs/%s", p->dir, file) : snprintf(out, cap, "%s/inputs/%s.wav", p->dir, clip);
    return len < 0 || (size_t)len >= cap ? -1 : 0;
}

static void clip_compute(const pm_parity *p, json_t *inputs, const char *clip, clip_run *c) {
    memset(c, 0, sizeof *c);
    char path[2048];
    if (clip_path(p, inputs, clip, path, sizeof path)) {
        snprintf(c->err, sizeof c->err, "clip %.100s: path longer than %zu bytes", clip, sizeof path - 1);
        return;
    }
    pm_err e = {0};
    if (pm_wave_read_file(&c->wave, path, &e) ||
        pm_audio_resample_policy(c->wave.samples, c->wave.n, c->wave.sample_rate, &c->resampled, &c->n_resampled, &c->sr_used, &e) ||
        pm_audio_magnitude(c->resampled, c->n_resampled, c->sr_used, &c->mag, &c->mag_frames, &e) ||
        pm_audio_logmel(c->wave.samples, c->wave.n, c->wave.sample_rate, &c->mel, &e))
        snprintf(c->err, sizeof c->err, "%s", e.msg);
}

static void check_clip(pm_parity *p, json_t *inputs, const char *clip, json_t *expect) {
    char rel[512], stage[512];
    const char *names[] = {"resampled_wav", "magnitude_spectrum", "logmel"};
    int wanted = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(stage, sizeof stage, "%s/%s", clip, names[i]);
        snprintf(rel, sizeof rel, "audio/%s/%s.npy", clip, names[i]);
        if (pm_parity_has(p, rel) && pm_parity_want(p, CASE, stage)) wanted = 1;
    }
    snprintf(stage, sizeof stage, "%s/frames", clip);
    if (pm_parity_want(p, CASE, stage)) wanted = 1;
    if (!wanted) return;

    clip_run c;
    clip_compute(p, inputs, clip, &c);
    for (int i = 0; i < 3; i++) {
        snprintf(stage, sizeof stage, "%s/%s", clip, names[i]);
        snprintf(rel, sizeof rel, "audio/%s/%s.npy", clip, names[i]);
        if (!pm_parity_has(p, rel) || !pm_parity_want(p, CASE, stage)) continue;
        if (c.err[0]) {
            pm_parity_mark_seen(p, rel); /* failed here: not also a file no check compares */
            pm_parity_fail(p, CASE, stage, "%s", c.err);
            continue;
        }
        if (i == 0) {
            pm_parity_check_f64(p, CASE, stage, rel, c.resampled, c.n_resampled, 1e-12);
        } else if (i == 1) {
            int64_t shape[2] = {c.mag_frames, PM_AUDIO_N_BINS};
            pm_parity_check_f32(p, CASE, stage, rel, c.mag, (size_t)c.mag_frames * PM_AUDIO_N_BINS, shape, 2, 0.0, 1e-5);
        } else {
            int64_t shape[2] = {c.mel.frames, PM_AUDIO_N_MELS};
            pm_parity_check_f32(p, CASE, stage, rel, c.mel.data, (size_t)c.mel.frames * PM_AUDIO_N_MELS, shape, 2, 1e-3, 0.0);
        }
    }
    snprintf(stage, sizeof stage, "%s/frames", clip);
    if (pm_parity_want(p, CASE, stage)) {
        if (c.err[0]) {
            pm_parity_fail(p, CASE, stage, "%s", c.err);
        } else {
            json_int_t want_frames = json_integer_value(json_object_get(expect, "num_frames"));
            json_int_t want_embed = json_integer_value(json_object_get(expect, "audio_embed_size"));
            json_int_t want_n = json_integer_value(json_object_get(expect, "num_samples"));
            json_int_t want_sr = json_integer_value(json_object_get(expect, "sample_rate"));
            int embed = pm_audio_embed_size(c.mel.frames);
            int ok = c.mel.frames == want_frames && embed == want_embed && (json_int_t)c.wave.n == want_n && c.wave.sample_rate == want_sr &&
                     pm_audio_num_frames(c.wave.n, c.wave.sample_rate) == c.mel.frames;
            pm_parity_report(p, CASE, stage, ok, "samples=%zu@%d Hz frames=%d audio_embed_size=%d (manifest %lld@%lld Hz, %lld, %lld)",
                             c.wave.n, c.wave.sample_rate, c.mel.frames, embed, (long long)want_n, (long long)want_sr,
                             (long long)want_frames, (long long)want_embed);
        }
    }
    clip_free(&c);
}

static void check_tables(pm_parity *p) {
    if (pm_parity_want(p, CASE, "mel_filterbank")) {
        float *m = malloc(sizeof(float) * PM_AUDIO_N_BINS * PM_AUDIO_N_MELS);
        if (!m) {
            pm_parity_fail(p, CASE, "mel_filterbank", "out of memory");
        } else {
            pm_mel_matrix(m);
            int64_t shape[2] = {PM_AUDIO_N_BINS, PM_AUDIO_N_MELS};
            pm_parity_check_f32(p, CASE, "mel_filterbank", "audio/mel_filterbank_257x80.npy", m, (size_t)PM_AUDIO_N_BINS * PM_AUDIO_N_MELS, shape,
                                2, 1e-7, 0.0);
            free(m);
        }
    }
    const int sizes[2] = {400, 200};
    for (int i = 0; i < 2; i++) {
        char stage[64], rel[64];
        snprintf(stage, sizeof stage, "hamming%d", sizes[i]);
        snprintf(rel, sizeof rel, "audio/hamming%d.npy", sizes[i]);
        if (!pm_parity_want(p, CASE, stage)) continue;
        double w[400];
        float wf[400];
        pm_hamming(w, sizes[i]);
        for (int k = 0; k < sizes[i]; k++) wf[k] = (float)w[k];
        int64_t shape[1] = {sizes[i]};
        pm_parity_check_f32(p, CASE, stage, rel, wf, (size_t)sizes[i], shape, 1, 1e-7, 0.0);
    }
}

static void check_batch(pm_parity *p, json_t *manifest, json_t *inputs) {
    const char *stages[3] = {"batch_ab/input_audio_embeds", "batch_ab/audio_embed_sizes", "batch_ab/audio_attention_mask"};
    int wanted = 0;
    for (int i = 0; i < 3; i++)
        if (pm_parity_want(p, CASE, stages[i])) wanted = 1;
    if (!wanted || !pm_parity_has(p, "audio/batch_ab/input_audio_embeds.npy")) return;
    json_t *clips = json_object_get(json_object_get(json_object_get(manifest, "cases"), "audio2"), "clips");
    if (json_array_size(clips) < 2) {
        for (int i = 0; i < 3; i++)
            if (pm_parity_want(p, CASE, stages[i])) pm_parity_fail(p, CASE, stages[i], "manifest case audio2 lists fewer than 2 clips");
        return;
    }
    clip_run c[2];
    pm_logmel mels[2];
    char err[1200] = "";
    for (int b = 0; b < 2; b++) {
        const char *name = json_string_value(json_array_get(clips, (size_t)b));
        clip_compute(p, inputs, name ? name : "(not a string)", &c[b]);
        if (c[b].err[0] && !err[0]) snprintf(err, sizeof err, "%s", c[b].err);
        mels[b] = c[b].mel;
    }
    float *feats = NULL;
    uint8_t *mask = NULL;
    int tmax = 0;
    int64_t sizes[2];
    pm_err e = {0};
    if (!err[0] && pm_audio_batch(mels, 2, &feats, &mask, &tmax, sizes, &e)) snprintf(err, sizeof err, "%s", e.msg);
    for (int i = 0; i < 3; i++) {
        if (!pm_parity_want(p, CASE, stages[i])) continue;
        char rel[128];
        snprintf(rel, sizeof rel, "audio/%s.npy", stages[i]);
        pm_parity_mark_seen(p, rel); /* a failure below is this stage's, not a file no check compares */
        if (err[0]) {
            pm_parity_fail(p, CASE, stages[i], "%s", err);
        } else if (i == 0) {
            int64_t shape[3] = {2, tmax, PM_AUDIO_N_MELS};
            pm_parity_check_f32(p, CASE, stages[i], rel, feats, (size_t)2 * tmax * PM_AUDIO_N_MELS, shape, 3, 1e-3, 0.0);
        } else if (i == 1) {
            pm_parity_check_i64(p, CASE, stages[i], rel, sizes, 2);
        } else {
            int64_t *m = malloc(sizeof(int64_t) * 2 * (size_t)(tmax > 0 ? tmax : 1));
            if (!m) {
                pm_parity_fail(p, CASE, stages[i], "out of memory");
                continue;
            }
            for (int k = 0; k < 2 * tmax; k++) m[k] = mask[k];
            pm_parity_check_i64(p, CASE, stages[i], rel, m, (size_t)2 * tmax);
            free(m);
        }
    }
    free(feats);
    free(mask);
    clip_free(&c[0]);
    clip_free(&c[1]);
}

void pm_parity_run_features(pm_parity *p) {
    char path[2048];
    json_error_t je;
    snprintf(path, sizeof path, "%s/ref/manifest.json", p->dir);
    json_t *manifest = json_load_file(path, 0, &je);
    if (!manifest) {
        pm_parity_fail(p, CASE, "manifest", "%s:%d:%d: %s", path, je.line, je.column, je.text);
        return;
    }
    snprintf(path, sizeof path, "%s/inputs/inputs.json", p->dir);
    json_t *inputs = json_load_file(path, 0, &je); /* optional: clip file names */
    json_t *features = json_object_get(manifest, "features");
    if (!json_is_object(features) || json_object_size(features) == 0) {
        pm_parity_fail(p, CASE, "manifest", "ref/manifest.json has no \"features\" clips");
    } else {
        const char *clip;
        json_t *expect;
        json_object_foreach(features, clip, expect) check_clip(p, inputs, clip, expect);
    }
    check_tables(p);
    check_batch(p, manifest, inputs);
    json_decref(inputs);
    json_decref(manifest);
}
