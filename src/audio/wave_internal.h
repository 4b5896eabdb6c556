/* wave_internal.h — what the audio decoders share (wave.c: libsndfile; wave_av.c: libavformat for
 * the containers libsndfile does not read): the mono sample buffer every decoder appends to, with
 * the duration cap, the memory gate and the checks that make every decoder's errors the same. */
#ifndef PM_AUDIO_WAVE_INTERNAL_H
#define PM_AUDIO_WAVE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "audio/wave.h"

typedef struct wave_sink {
    const char *what;          /* names the payload in errors */
    double max_seconds;        /* > 0: PM_ELIMIT once the decoded length is over it */
    const pm_media_gate *gate; /* asked before the buffer grows; may be NULL */
    int rate;                  /* Hz; set before the first wave_sink_put */
    double *mono;
    size_t n, cap;
    int64_t taken; /* bytes the gate granted */
} wave_sink;

/* Appends `frames` frames of `ch` interleaved channels, each frame as the mean of its channels
 * (summed in channel order, then divided, as the official extractor does). PM_OK, or PM_ELIMIT /
 * PM_EBUSY / PM_ENOMEM with e set. */
int wave_sink_put(wave_sink *s, const double *f, size_t frames, int ch, pm_err *e);

/* Ends a decode: with rc == PM_OK checks the samples (some, all finite) and hands them to *out
 * (the buffer trimmed and the rest given back to the gate); otherwise, or when a check fails,
 * frees them and gives every byte back. Returns the final code. */
int wave_sink_finish(wave_sink *s, int rc, pm_wave *out, pm_err *e);

/* Whether the payload starts as a container that wave_av_decode reads (ISO BMFF: MP4 / M4A / MOV;
 * EBML: Matroska / WebM). */
int wave_av_sniff(const void *data, size_t len);

/* Decodes the first audio stream of such a payload into s (s->rate set from it), then
 * wave_sink_finish. */
int wave_av_decode(wave_sink *s, const void *data, size_t len, pm_wave *out, pm_err *e);

#endif
