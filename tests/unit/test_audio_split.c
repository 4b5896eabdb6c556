/* test_audio_split.c — pm_audio_split, the long-form cut points: pieces cover the clip in order,
 * none is longer than the window, they are balanced, and cuts land in the pauses of a signal whose
 * pauses are known (tone bursts with silence between them at places the cuts must find). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "phi4mm.h"

static double *tone(size_t n, int sr) {
    double *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = 0.3 * sin(2 * M_PI * 440.0 * (double)i / sr);
    return x;
}

/* Cover, order, window and the minimum length the balancing promises (over 0.3 windows). */
static void check_cover(const pm_audio_in *a, double max_seconds, const pm_audio_span *s, int k) {
    size_t window = (size_t)(max_seconds * a->sample_rate);
    assert_true(k >= 1);
    assert_int_equal(s[0].start, 0);
    assert_int_equal(s[k - 1].end, a->n_samples);
    for (int i = 0; i < k; i++) {
        assert_true(s[i].end > s[i].start);
        assert_true(s[i].end - s[i].start <= window);
        if (i) assert_int_equal(s[i].start, s[i - 1].end);
        if (k > 1) assert_true((double)(s[i].end - s[i].start) > 0.3 * (double)window);
    }
}

static void test_short_clip_is_one_piece(void **st) {
    (void)st;
    double *x = tone(16000 * 12, 16000);
    pm_audio_in a = {x, 16000 * 12, 16000};
    pm_audio_span *s = NULL;
    assert_int_equal(pm_audio_split(&a, 30.0, &s), 1);
    assert_int_equal(s[0].start, 0);
    assert_int_equal(s[0].end, a.n_samples);
    free(s);
    /* exactly the window: still one */
    a.n_samples = 16000 * 30;
    assert_int_equal(pm_audio_split(&a, 30.0, &s), 1);
    free(s);
    free(x);
}

static void test_bad_arguments(void **st) {
    (void)st;
    double x[4] = {0};
    pm_audio_in a = {x, 4, 16000};
    pm_audio_span *s = (pm_audio_span *)1;
    assert_int_equal(pm_audio_split(&a, 0.5, &s), -1); /* a window under 1 s */
    assert_null(s);
    a.sample_rate = 0;
    assert_int_equal(pm_audio_split(&a, 30.0, &s), -1);
    assert_int_equal(pm_audio_split(NULL, 30.0, &s), -1);
}

/* Uniform tone (no pauses): balanced pieces, every length rule held, for many lengths and rates. */
static void test_balanced_without_pauses(void **st) {
    (void)st;
    int rates[] = {8000, 16000, 44100, 48000};
    double lengths[] = {30.01, 31.0, 59.9, 61.0, 95.5, 300.0};
    for (size_t r = 0; r < 4; r++)
        for (size_t l = 0; l < 6; l++) {
            size_t n = (size_t)(lengths[l] * rates[r]);
            double *x = tone(n, rates[r]);
            pm_audio_in a = {x, n, rates[r]};
            pm_audio_span *s = NULL;
            int k = pm_audio_split(&a, 30.0, &s);
            assert_int_equal(k, (int)ceil(lengths[l] / 30.0));
            check_cover(&a, 30.0, s, k);
            free(s);
            free(x);
        }
}

/* 100 s of tone with 400 ms pauses at 24.0, 49.0 and 74.3 s (and decoys at 10 and 90 s, outside
 * every search range): 4 pieces, cut in the middles of those pauses. */
static void test_cuts_land_in_pauses(void **st) {
    (void)st;
    const int sr = 16000;
    size_t n = (size_t)100 * sr;
    double *x = tone(n, sr);
    double pauses[] = {24.0, 49.0, 74.3, 10.0, 90.0};
    for (int p = 0; p < 5; p++)
        for (size_t i = (size_t)((pauses[p] - 0.2) * sr); i < (size_t)((pauses[p] + 0.2) * sr); i++) x[i] = 0;
    pm_audio_in a = {x, n, sr};
    pm_audio_span *s = NULL;
    int k = pm_audio_split(&a, 30.0, &s);
    assert_int_equal(k, 4);
    check_cover(&a, 30.0, s, k);
    for (int c = 0; c < 3; c++) {
        double at = (double)s[c].end / sr;
        if (fabs(at - pauses[c]) > 0.02) print_message("cut %d at %.3f s\n", c, at);
        assert_true(fabs(at - pauses[c]) <= 0.02);
    }
    free(s);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_clip_is_one_piece),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_balanced_without_pauses),
        cmocka_unit_test(test_cuts_land_in_pauses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
