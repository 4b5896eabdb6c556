/* audio_diff_driver.c — test-only command-line front for the audio front-end, driven by
 * tests/e2e/audio_diff.py (which builds it against libphi4mm.a). It runs a job file, one job per line,
 * reading and writing raw little-endian arrays, and prints one result line per job:
 *   resample UP DOWN IN.f64 OUT.f64        -> "OK n=<n_out>"           pm_resample_poly
 *   design MAXRATE OUT.f64                 -> "OK n=<taps>"            pm_resample_design
 *   features SR IN.f64 RES.f64 MAG.f32 MEL.f32
 *                                          -> "OK frames=<T> sr=<used> n=<resampled>" or "ERR <message>"
 *                                             (policy, magnitude of the resampled clip, log-mel)
 *   mel OUT.f32                            -> "OK"                     pm_mel_matrix
 *   hamming N OUT.f64                      -> "OK"                     pm_hamming
 *   decode FILE OUT.f64                    -> "OK n=<n> sr=<rate>" or "ERR <message>"
 *                                             (pm_wave_read_file: mono samples)
 * Not part of the library or the binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/features.h"
#include "audio/resample.h"
#include "audio/wave.h"

static double *read_f64(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    double *d = malloc(sz > 0 ? (size_t)sz : 8);
    *n = (size_t)sz / sizeof(double);
    if (sz > 0 && fread(d, sizeof(double), *n, f) != *n) {
        free(d);
        d = NULL;
    }
    fclose(f);
    return d;
}

static int write_raw(const char *path, const void *p, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = bytes ? fwrite(p, 1, bytes, f) : 0;
    fclose(f);
    return w == bytes ? 0 : -1;
}

static void job_features(int sr, const char *in, const char *res_path, const char *mag_path, const char *mel_path) {
    size_t n;
    double *x = read_f64(in, &n);
    if (!x) {
        printf("ERR cannot read %s\n", in);
        return;
    }
    pm_err e = {0};
    pm_logmel lm;
    if (pm_audio_logmel(x, n, sr, &lm, &e)) {
        printf("ERR %s\n", e.msg);
        free(x);
        return;
    }
    double *r;
    size_t nr;
    int used;
    float *mag;
    int frames;
    if (pm_audio_resample_policy(x, n, sr, &r, &nr, &used, &e) || pm_audio_magnitude(r, nr, used, &mag, &frames, &e)) {
        printf("ERR (inconsistent) %s\n", e.msg);
        pm_logmel_free(&lm);
        free(x);
        return;
    }
    write_raw(res_path, r, nr * sizeof(double));
    write_raw(mag_path, mag, (size_t)frames * PM_AUDIO_N_BINS * sizeof(float));
    write_raw(mel_path, lm.data, (size_t)lm.frames * PM_AUDIO_N_MELS * sizeof(float));
    printf("OK frames=%d sr=%d n=%zu magframes=%d\n", lm.frames, lm.sample_rate_used, nr, frames);
    free(r);
    free(mag);
    pm_logmel_free(&lm);
    free(x);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s JOBFILE\n", argv[0]);
        return 2;
    }
    FILE *jf = fopen(argv[1], "r");
    if (!jf) {
        perror(argv[1]);
        return 2;
    }
    char line[4096], a[1024], b[1024], c[1024], d[1024];
    int i1, i2;
    while (fgets(line, sizeof line, jf)) {
        pm_err e = {0};
        if (sscanf(line, "resample %d %d %1023s %1023s", &i1, &i2, a, b) == 4) {
            size_t n, ny;
            double *x = read_f64(a, &n), *y;
            if (!x) {
                printf("ERR cannot read %s\n", a);
            } else if (pm_resample_poly(x, n, i1, i2, &y, &ny, &e)) {
                printf("ERR %s\n", e.msg);
            } else {
                write_raw(b, y, ny * sizeof(double));
                printf("OK n=%zu\n", ny);
                free(y);
            }
            free(x);
        } else if (sscanf(line, "design %d %1023s", &i1, a) == 2) {
            size_t taps = (size_t)20 * (size_t)i1 + 1;
            double *h = malloc(taps * sizeof(double));
            pm_resample_design(h, i1);
            write_raw(a, h, taps * sizeof(double));
            printf("OK n=%zu\n", taps);
            free(h);
        } else if (sscanf(line, "features %d %1023s %1023s %1023s %1023s", &i1, a, b, c, d) == 5) {
            job_features(i1, a, b, c, d);
        } else if (sscanf(line, "decode %1023s %1023s", a, b) == 2) {
            pm_wave w;
            if (pm_wave_read_file(&w, a, &e)) {
                printf("ERR %s\n", e.msg);
            } else {
                write_raw(b, w.samples, w.n * sizeof(double));
                printf("OK n=%zu sr=%d\n", w.n, w.sample_rate);
                pm_wave_free(&w);
            }
        } else if (sscanf(line, "mel %1023s", a) == 1) {
            float m[PM_AUDIO_N_BINS * PM_AUDIO_N_MELS];
            pm_mel_matrix(m);
            write_raw(a, m, sizeof m);
            printf("OK\n");
        } else if (sscanf(line, "hamming %d %1023s", &i1, a) == 2) {
            double *w = malloc(sizeof(double) * (size_t)(i1 > 0 ? i1 : 1));
            pm_hamming(w, i1);
            write_raw(a, w, sizeof(double) * (size_t)(i1 > 0 ? i1 : 0));
            printf("OK\n");
            free(w);
        } else {
            printf("ERR bad job line\n");
        }
        fflush(stdout);
    }
    fclose(jf);
    return 0;
}
