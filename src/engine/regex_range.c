/* regex_range.c — the decimal integers of a range as a regular expression (pm_regex_of_int_range,
 * regex.h): what a JSON schema's minimum / maximum on an integer become, so that JSON mode holds
 * the digits to the range as it writes them.
 *
 * The canonical forms only (JSON's: no '+', no leading zero, no "-0"). A range of magnitudes
 * [a, b] splits by digit count; each count's [lo, hi] (same length) is written digit by digit:
 * equal leading digits are literals, and where they differ the rest is lo's tail up to all nines,
 * the digits strictly between with any tail, and hi's tail down from all zeros. */
#include "engine/regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RANGE_MAX_DIGITS = 19, RANGE_CAP = 1 << 14 };

typedef struct out_buf {
    char *p;
    size_t n, cap;
    int full;
} out_buf;

static void put(out_buf *o, const char *s) {
    size_t k = strlen(s);
    if (o->n + k + 1 > o->cap) {
        o->full = 1;
        return;
    }
    memcpy(o->p + o->n, s, k + 1);
    o->n += k;
}

static void put_char(out_buf *o, char c) {
    char s[2] = {c, 0};
    put(o, s);
}

/* [0-9]{k} (nothing for k = 0) */
static void any_digits(out_buf *o, int k) {
    char s[24];
    if (k == 1) put(o, "[0-9]");
    else if (k > 1) {
        snprintf(s, sizeof s, "[0-9]{%d}", k);
        put(o, s);
    }
}

static int all_of(const char *s, int n, char c) {
    for (int i = 0; i < n; i++)
        if (s[i] != c) return 0;
    return 1;
}

/* The numbers of n digits from lo to hi (lo <= hi, both n digits, leading zeros allowed here:
 * the tails of a longer number). */
static void same_length(out_buf *o, const char *lo, const char *hi, int n) {
    while (n > 0 && *lo == *hi) { /* a shared leading digit */
        put_char(o, *lo);
        lo++, hi++, n--;
    }
    if (n == 0) return;
    int rest = n - 1, low_whole = all_of(lo + 1, rest, '0'), high_whole = all_of(hi + 1, rest, '9');
    int first = *lo - '0' + !low_whole, last = *hi - '0' - !high_whole; /* leading digits taking any tail */
    char nines[RANGE_MAX_DIGITS + 1], zeros[RANGE_MAX_DIGITS + 1];
    memset(nines, '9', (size_t)rest);
    memset(zeros, '0', (size_t)rest);
    nines[rest] = zeros[rest] = 0;
    int alts = !low_whole + (first <= last) + !high_whole, k = 0;
    if (alts > 1) put_char(o, '(');
    if (!low_whole) {
        put_char(o, *lo);
        same_length(o, lo + 1, nines, rest);
        k++;
    }
    if (first <= last) {
        if (k++) put_char(o, '|');
        char set[16];
        if (first == last) snprintf(set, sizeof set, "%d", first);
        else snprintf(set, sizeof set, "[%d-%d]", first, last);
        put(o, set);
        any_digits(o, rest);
    }
    if (!high_whole) {
        if (k++) put_char(o, '|');
        put_char(o, *hi);
        same_length(o, zeros, hi + 1, rest);
    }
    if (alts > 1) put_char(o, ')');
}

/* Alternatives for the magnitudes [a, b] (0 <= a; b < 0: no upper end), each after a '|' but the
 * first (*k counts them). */
static void magnitudes(out_buf *o, long long a, long long b, int *k) {
    if (b >= 0 && b < a) return;
    if (a == 0) {
        put(o, (*k)++ ? "|0" : "0");
        if (b == 0) return;
        a = 1;
    }
    char as[24], bs[24];
    int la = snprintf(as, sizeof as, "%lld", a), lb = b >= 0 ? snprintf(bs, sizeof bs, "%lld", b) : la;
    for (int len = la; len <= lb; len++) {
        char lo[24], hi[24];
        if (len == la) memcpy(lo, as, (size_t)la + 1);
        else {
            lo[0] = '1';
            memset(lo + 1, '0', (size_t)len - 1);
            lo[len] = 0;
        }
        if (b >= 0 && len == lb) memcpy(hi, bs, (size_t)lb + 1);
        else {
            memset(hi, '9', (size_t)len);
            hi[len] = 0;
        }
        if ((*k)++) put_char(o, '|');
        same_length(o, lo, hi, len);
    }
    if (b < 0) { /* no upper end: a's length from a on, then any longer number */
        char s[48];
        snprintf(s, sizeof s, "|[1-9][0-9]{%d,}", la);
        put(o, s);
    }
}

char *pm_regex_of_int_range(long long lo, int has_lo, long long hi, int has_hi, pm_err *e) {
    const long long lim = 1000000000000000000LL; /* 10^18: magnitudes of at most 19 digits */
    if ((has_lo && (lo < -lim || lo > lim)) || (has_hi && (hi < -lim || hi > lim))) {
        pm_errf(e, PM_EUNSUPPORTED, "integer bounds beyond +/-10^18 are not supported");
        return NULL;
    }
    if (has_lo && has_hi && lo > hi) {
        pm_errf(e, PM_EINVAL, "no integer lies between %lld and %lld", lo, hi);
        return NULL;
    }
    out_buf o = {malloc(RANGE_CAP), 0, RANGE_CAP, 0};
    if (!o.p) {
        pm_errf(e, PM_ENOMEM, "out of memory for an integer range's pattern");
        return NULL;
    }
    o.p[0] = 0;
    int k = 0;
    put_char(&o, '(');
    if (!has_lo || lo < 0) { /* the negatives: '-' and a magnitude of at least 1 */
        long long mlo = has_hi && hi < 0 ? -hi : 1, mhi = has_lo ? -lo : -1;
        int j = 0;
        put(&o, "-(");
        magnitudes(&o, mlo, mhi, &j);
        put_char(&o, ')');
        k++;
    }
    if (!has_hi || hi >= 0) {
        int j = 0;
        if (k) put_char(&o, '|');
        magnitudes(&o, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1, &j);
    }
    put_char(&o, ')');
    if (o.full) {
        free(o.p);
        pm_errf(e, PM_ESTATE, "an integer range's pattern outgrew %d bytes", RANGE_CAP);
        return NULL;
    }
    return o.p;
}
