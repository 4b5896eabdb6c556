/* wave.h — decoding audio files and payloads into mono float64 samples.
 *
 * The samples are those `soundfile.read(path)` gives (libsndfile's normalised doubles: int16/32768,
 * int24/2^23, int32/2^31, unsigned 8-bit (x-128)/128, float data as stored), with multichannel
 * audio reduced to the mean of its channels (summed in channel order, then divided), as the official
 * feature extractor does. Formats: whatever the system libsndfile decodes — WAV (PCM 8/16/24/32,
 * float, double), FLAC, Ogg Vorbis/Opus, MP3 (libsndfile >= 1.1), AIFF, ... — and, through
 * libavformat / libavcodec, the containers phones and browsers record in: MP4 / M4A / MOV (AAC,
 * ALAC, ...) and WebM / Matroska (Opus, Vorbis, FLAC, PCM, ...), told apart by their first bytes
 * (wave_av.c: the samples as the decoder gives them, integers normalised as libsndfile does). */
#ifndef PM_AUDIO_WAVE_H
#define PM_AUDIO_WAVE_H

#include <stddef.h>
#include "phi4mm.h"
#include "util/err.h"

typedef struct pm_wave {
    double *samples;   /* n mono samples, malloc'd */
    size_t n;
    int sample_rate;   /* Hz, as declared by the file */
} pm_wave;

/* Lowest sample rate the feature extractor accepts (the official code refuses anything below). */
#define PM_WAVE_MIN_RATE 8000

/* Decodes the file at `path` into *out (mono float64). Errors, each naming the path:
 * unreadable file (PM_EIO), unrecognised/unsupported or malformed data incl. a truncated header
 * (PM_EFORMAT), no samples (PM_EINVAL), a NaN or infinite sample (PM_EINVAL, with its index),
 * a sample rate below 8000 Hz (PM_EINVAL). On failure *out is zeroed. */
int pm_wave_read_file(pm_wave *out, const char *path, pm_err *e);

/* Same as pm_wave_read_file for an in-memory payload of len bytes (e.g. an upload or a base64-decoded
 * data URI) through libsndfile's virtual I/O; `what` names it in error messages. The buffer is only
 * read during the call. */
int pm_wave_read_memory(pm_wave *out, const void *data, size_t len, const char *what, pm_err *e);

/* Same, but stops decoding with PM_ELIMIT ("... over the limit of S s ...") as soon as the clip
 * exceeds max_seconds (its duration at its own rate), before it is decoded whole: what untrusted
 * callers (the server) should use, since compressed formats decode to thousands of times their
 * size. max_seconds <= 0: no limit. */
int pm_wave_read_memory_max(pm_wave *out, const void *data, size_t len, const char *what, double max_seconds, pm_err *e);

/* Same, and every growth of the sample buffer asks `gate` first (phi4mm.h: pm_media_gate): PM_EBUSY
 * or PM_ELIMIT when it refuses. gate may be NULL. */
int pm_wave_read_memory_gated(pm_wave *out, const void *data, size_t len, const char *what, double max_seconds, const pm_media_gate *gate,
                              pm_err *e);

/* Silences the container decoders' own log (libavformat / libavcodec print to stderr; the errors
 * returned here carry their reason), now or when they are first opened (audio/av_lib.h).
 * Process-wide: for programs, not for a library to call. */
void pm_wave_quiet(void);

/* Frees the samples; safe on a zeroed or already freed wave. */
void pm_wave_free(pm_wave *w);

#endif
