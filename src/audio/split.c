/* split.c — cuts a long clip into pieces for long-form transcription (pm_audio_split).
 *
 * The model card gives 40 s as the length for the best recognition; the official code has no
 * long-form mode, so this is ours. Pieces are balanced (a clip of k windows' length gets k pieces
 * of about its length / k, so no piece is a sliver) and each cut is moved to the quietest moment
 * near its target: the 10 ms step whose surrounding 200 ms holds the least energy (the middle of a run of them), within 2 s (or a
 * fifth of the window, when smaller) of the target, never past the window and never so early that
 * the rest would need one piece more (so a clip gets ceil(length / window) pieces). Energy is summed in
 * 10 ms hops first, so the search costs one pass over the samples whatever the clip's length. */
#include <math.h>
#include <stdlib.h>

#include "phi4mm.h"

enum { WINDOW_HOPS = 20 }; /* 200 ms of 10 ms hops around a candidate cut */

/* The energy of the WINDOW_HOPS hops centred on hop boundary h (prefix[i] = energy of hops [0, i)). */
static double window_energy(const double *prefix, size_t n_hops, size_t h) {
    size_t lo = h > WINDOW_HOPS / 2 ? h - WINDOW_HOPS / 2 : 0;
    size_t hi = h + WINDOW_HOPS / 2 < n_hops ? h + WINDOW_HOPS / 2 : n_hops;
    return prefix[hi] - prefix[lo];
}

int pm_audio_split(const pm_audio_in *a, double max_seconds, pm_audio_span **out) {
    *out = NULL;
    if (!a || a->sample_rate <= 0 || !(max_seconds >= 1.0)) return -1;
    size_t n = a->n_samples, sr = (size_t)a->sample_rate;
    double w_samples = max_seconds * (double)sr;
    size_t window = w_samples >= (double)n ? n : (size_t)w_samples;
    /* every piece but the last is over 0.3 windows long (half a window less the slack) */
    size_t cap = window > 0 && n > window ? 4 * (n / window) + 4 : 1;
    pm_audio_span *spans = malloc(cap * sizeof *spans);
    if (!spans) return -1;
    int count = 0;
    if (n <= window) {
        spans[0] = (pm_audio_span){0, n};
        *out = spans;
        return 1;
    }
    size_t hop = sr / 100 ? sr / 100 : 1, n_hops = n / hop;
    double *prefix = malloc((n_hops + 1) * sizeof *prefix);
    if (!prefix) {
        free(spans);
        return -1;
    }
    prefix[0] = 0;
    for (size_t h = 0; h < n_hops; h++) {
        double s = 0;
        for (size_t i = h * hop; i < (h + 1) * hop; i++) s += a->samples[i] * a->samples[i];
        prefix[h + 1] = prefix[h] + s;
    }
    size_t slack = 2 * sr < window / 5 ? 2 * sr : window / 5;
    size_t start = 0;
    while (n - start > window) {
        size_t rest = n - start, pieces = (rest + window - 1) / window;
        size_t target = start + rest / pieces;
        /* never so early that the rest needs one piece more, never past the window */
        size_t lo = target - slack, hi = target + slack < start + window ? target + slack : start + window;
        if (lo < n - (pieces - 1) * window) lo = n - (pieces - 1) * window;
        /* candidates are hop boundaries in [lo, hi]: the least energy wins; a run of equally quiet
         * ones (digital silence) is taken at its middle, the run nearest the target first */
        size_t h_lo = (lo + hop - 1) / hop, h_hi = hi / hop < n_hops ? hi / hop : n_hops;
        double least = INFINITY;
        for (size_t h = h_lo; h <= h_hi; h++) least = fmin(least, window_energy(prefix, n_hops, h));
        size_t best = target, best_d = (size_t)-1;
        for (size_t h = h_lo; h <= h_hi; h++) {
            if (window_energy(prefix, n_hops, h) != least) continue;
            size_t run = h;
            while (h + 1 <= h_hi && window_energy(prefix, n_hops, h + 1) == least) h++;
            size_t c = (run + h) / 2 * hop, d = c > target ? c - target : target - c;
            if (d < best_d) {
                best = c;
                best_d = d;
            }
        }
        spans[count++] = (pm_audio_span){start, best};
        start = best;
    }
    spans[count++] = (pm_audio_span){start, n};
    free(prefix);
    *out = spans;
    return count;
}
