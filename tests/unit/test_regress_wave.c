/* test_regress_wave.c — regression inputs found by fuzz/fuzz_wave.c.
 *
 * 1. A Sun/NeXT .au file of 32-bit float samples whose values are finite but huge (1.6e38 in the
 *    fuzzer's input; the header below is the fuzzer's, byte for byte) decoded fine, then the
 *    official float32 feature extractor overflowed: |S|^2 became inf, the log-mel features inf/NaN,
 *    which would have reached the speech encoder and the sampler. Fixed in pm_audio_logmel: a
 *    non-finite feature is refused with PM_EINVAL ("... not finite ..."). The payload is the
 *    header + 560 big-endian float samples (2 frames at 16 kHz) of the fuzzer's magnitude.
 * 2. Decompression bomb (found reviewing what the wave harness's inputs cost): the decoder read a
 *    whole clip before anyone checked its duration, and FLAC codes digital silence in ~12 bytes per
 *    4096-sample block: an 89 KB FLAC of 600 s at 48 kHz took 264 MB of RSS before "over the limit"
 *    (a 64 MiB upload: ~190 GB). Fixed: pm_wave_read_memory_max / pm_audio_decode_max stop
 *    decoding once the clip exceeds the limit. The FLAC is written here by libsndfile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audio/features.h"
#include "audio/wave.h"
#include "phi4mm.h"
#include "flac_silence.h"

/* ".snd", data offset 24, data size 0x1900, encoding 6 (32-bit IEEE float), 16000 Hz, 1 channel */
static const uint8_t CRASH_AU_HEADER[24] = {0x2e, 0x73, 0x6e, 0x64, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x19, 0x00,
                                            0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x3e, 0x80, 0x00, 0x00, 0x00, 0x01};
#define N_SAMPLES 560

static uint8_t *make_au(float value, size_t *len) {
    *len = sizeof CRASH_AU_HEADER + 4 * N_SAMPLES;
    uint8_t *b = malloc(*len);
    memcpy(b, CRASH_AU_HEADER, sizeof CRASH_AU_HEADER);
    uint32_t u;
    memcpy(&u, &value, 4);
    for (int i = 0; i < N_SAMPLES; i++) {
        float v = (i % 2) ? value : -value;
        memcpy(&u, &v, 4);
        uint8_t *p = b + sizeof CRASH_AU_HEADER + 4 * i;
        p[0] = (uint8_t)(u >> 24), p[1] = (uint8_t)(u >> 16), p[2] = (uint8_t)(u >> 8), p[3] = (uint8_t)u;
    }
    return b;
}

static void test_huge_finite_samples(void **state) {
    (void)state;
    size_t len;
    uint8_t *au = make_au(1.60331e38f, &len);
    pm_wave w;
    pm_err e = {0};
    assert_int_equal(pm_wave_read_memory(&w, au, len, "huge.au", &e), PM_OK); /* finite: the decoder accepts it */
    assert_int_equal(w.n, N_SAMPLES);
    assert_int_equal(w.sample_rate, 16000);
    pm_logmel m;
    assert_int_equal(pm_audio_logmel(w.samples, w.n, w.sample_rate, &m, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "not finite"));
    assert_null(m.data);
    pm_wave_free(&w);
    free(au);
}

static void test_loud_but_sane_samples(void **state) {
    (void)state;
    size_t len;
    uint8_t *au = make_au(1000.0f, &len); /* clipped-and-gained audio: large, but features stay finite */
    pm_wave w;
    pm_err e = {0};
    assert_int_equal(pm_wave_read_memory(&w, au, len, "loud.au", &e), PM_OK);
    pm_logmel m;
    assert_int_equal(pm_audio_logmel(w.samples, w.n, w.sample_rate, &m, &e), PM_OK);
    assert_int_equal(m.frames, 2);
    pm_logmel_free(&m);
    pm_wave_free(&w);
    free(au);
}

static void test_flac_bomb_stops_early(void **state) {
    (void)state;
    size_t len;
    uint8_t *flac = flac_silence(300, &len); /* 4.8 M samples, a few tens of KB */
    assert_true(len < 200000);
    pm_wave w;
    pm_err e = {0};
    assert_int_equal(pm_wave_read_memory_max(&w, flac, len, "bomb.flac", 10.0, &e), PM_ELIMIT);
    assert_null(w.samples);
    assert_non_null(strstr(e.msg, "bomb.flac: audio runs over the limit of 10.0000 s per request"));
    const char *at = strstr(e.msg, "decoding stopped at ");
    assert_non_null(at);
    assert_true(atof(at + 20) < 11.1); /* one 16384-sample chunk past the limit, not 300 s */
    /* the public call, and the limit is inclusive */
    pm_audio_in a;
    char err[512];
    assert_int_equal(pm_audio_decode_max(flac, len, "bomb.flac", 300.0, &a, err, sizeof err), PM_OK);
    assert_int_equal(a.n_samples, 300 * 16000);
    pm_audio_in_free(&a);
    assert_int_equal(pm_audio_decode_max(flac, len, "bomb.flac", 299.99, &a, err, sizeof err), PM_ELIMIT);
    assert_null(a.samples);
    free(flac);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_finite_samples),
        cmocka_unit_test(test_loud_but_sane_samples),
        cmocka_unit_test(test_flac_bomb_stops_early),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
