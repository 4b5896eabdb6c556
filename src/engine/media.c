/* media.c — the public decode calls: bytes in, mono float64 samples or RGB8 pixels out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/wave.h"
#include "phi4mm.h"
#include "util/err.h"
#include "vision/image_file.h"

int pm_audio_decode(const void *bytes, size_t len, const char *what, pm_audio_in *out, char *err, size_t errlen) {
    return pm_audio_decode_max(bytes, len, what, 0, out, err, errlen);
}

int pm_audio_decode_max(const void *bytes, size_t len, const char *what, double max_seconds, pm_audio_in *out, char *err,
                        size_t errlen) {
    return pm_audio_decode_gated(bytes, len, what, max_seconds, NULL, out, err, errlen);
}

int pm_audio_decode_gated(const void *bytes, size_t len, const char *what, double max_seconds, const pm_media_gate *gate,
                          pm_audio_in *out, char *err, size_t errlen) {
    pm_err e = {0};
    pm_wave w = {0};
    memset(out, 0, sizeof *out);
    if (pm_wave_read_memory_gated(&w, bytes, len, what, max_seconds, gate, &e)) {
        if (err && errlen) snprintf(err, errlen, "%s", e.msg);
        return e.code;
    }
    out->samples = w.samples;
    out->n_samples = w.n;
    out->sample_rate = w.sample_rate;
    return PM_OK;
}

void pm_audio_in_free(pm_audio_in *a) {
    free((void *)a->samples);
    memset(a, 0, sizeof *a);
}

int pm_image_decode(const void *bytes, size_t len, const char *what, int64_t max_pixels, pm_image_in *out, char *err, size_t errlen) {
    return pm_image_decode_gated(bytes, len, what, max_pixels, NULL, out, err, errlen);
}

int pm_image_decode_gated(const void *bytes, size_t len, const char *what, int64_t max_pixels, const pm_media_gate *gate,
                          pm_image_in *out, char *err, size_t errlen) {
    pm_err e = {0};
    pm_image im = {0};
    memset(out, 0, sizeof *out);
    if (pm_image_read_memory_gated(&im, bytes, len, what, max_pixels, gate, &e)) {
        if (err && errlen) snprintf(err, errlen, "%s", e.msg);
        return e.code;
    }
    out->rgb = im.rgb;
    out->width = im.width;
    out->height = im.height;
    return PM_OK;
}

void pm_image_in_free(pm_image_in *im) {
    free((void *)im->rgb);
    memset(im, 0, sizeof *im);
}
