/* fuzz_wave.c — libFuzzer harness for audio payloads through the real decoder path:
 * pm_wave_read_memory_gated (libsndfile virtual I/O: WAV, FLAC, Ogg, MP3, AIFF, ...; MP4 / M4A and
 * WebM / Matroska through libavformat, seeded by make_corpus.sh when the ffmpeg CLI is there; a 5 s cap, so
 * a decompression bomb is refused while decoding, and a memory gate whose budget follows the
 * input's size, as in the server: a refusal gives back every byte, an accepted clip holds exactly
 * its samples' bytes), then, when it
 * decodes, the official feature extractor pm_audio_logmel and the batcher pm_audio_batch.
 *
 * Properties of an accepted clip: n > 0 samples, all finite, rate >= 8000 Hz, at most 5 s; the
 * extractor either refuses it (too short, or finite samples so large that the float32 spectrum
 * overflows) or gives exactly pm_audio_num_frames() frames of finite log-mel values, and
 * pm_audio_embed_size agrees with the batcher. Clips over 8000 samples skip the extractor (it is
 * linear in the length and covered by the parity tests; the point here is the decoder). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "audio/features.h"
#include "audio/wave.h"
#include "fuzz_util.h"

/* The duration cap passed to the decoder, as the server passes limits.max_audio_seconds. Small, so
 * that mutated Ogg/Opus/ADPCM streams claiming long durations cost milliseconds, not 40 ms. */
#define MAX_SECONDS 5.0
/* Longer clips skip the feature extractor: under ASan a 1 s clip at 48 kHz costs ~80 ms there
 * (resample_poly, 100 FFT frames), which would cap the target at ~20 inputs per second. */
#define EXTRACT_MAX_SAMPLES 8000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) pm_wave_quiet(), quiet = 1; /* libav's log would drown the fuzzer's */
    pm_wave w;
    pm_err e = {0};
    /* through a memory gate (as the server decodes) whose budget follows the input's size: from a
     * few KB (refusals mid-decode) to more than any 5 s clip needs */
    fuzz_gate g = {0, (int64_t)(size % 7 + 1) * (int64_t)(size % 5 ? 1 << 15 : 1 << 22), size % 3 ? 1 : 2};
    pm_media_gate gate = {fuzz_gate_adjust, &g};
    if (pm_wave_read_memory_gated(&w, data, size, "fuzz.wav", MAX_SECONDS, &gate, &e) != PM_OK) {
        FUZZ_CHECK(w.samples == NULL && w.n == 0 && e.code < 0 && e.msg[0]);
        FUZZ_CHECK(g.taken == 0);
        return 0;
    }
    FUZZ_CHECK(g.taken == (int64_t)(w.n * sizeof(double)));
    FUZZ_CHECK(w.samples != NULL && w.n > 0 && w.sample_rate >= PM_WAVE_MIN_RATE);
    FUZZ_CHECK((double)w.n / w.sample_rate <= MAX_SECONDS);
    for (size_t i = 0; i < w.n; i++) FUZZ_CHECK(isfinite(w.samples[i]));
    if (w.n <= EXTRACT_MAX_SAMPLES) {
        pm_logmel m;
        memset(&e, 0, sizeof e);
        int want = pm_audio_num_frames(w.n, w.sample_rate);
        if (pm_audio_logmel(w.samples, w.n, w.sample_rate, &m, &e) == PM_OK) {
            FUZZ_CHECK(m.frames == want && m.frames >= PM_AUDIO_MIN_FRAMES);
            FUZZ_CHECK(m.sample_rate_used == 16000 || m.sample_rate_used == 8000);
            for (size_t i = 0; i < (size_t)m.frames * PM_AUDIO_N_MELS; i++) FUZZ_CHECK(isfinite(m.data[i]) && m.data[i] >= 0.0f);
            float *feats = NULL;
            uint8_t *mask = NULL;
            int t_max = 0;
            int64_t es = 0;
            FUZZ_CHECK(pm_audio_batch(&m, 1, &feats, &mask, &t_max, &es, &e) == PM_OK);
            FUZZ_CHECK(t_max == m.frames && es == pm_audio_embed_size(m.frames));
            free(feats);
            free(mask);
            pm_logmel_free(&m);
        } else {
            /* refused: too short, or samples so large that the features overflow */
            FUZZ_CHECK(e.code == PM_EINVAL && (want < PM_AUDIO_MIN_FRAMES || strstr(e.msg, "not finite")));
        }
    }
    pm_wave_free(&w);
    return 0;
}
