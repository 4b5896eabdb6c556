/* regex_range.c — ranges of numbers as regular expressions (regex.h): what a JSON schema's
 * minimum / maximum become, so that JSON mode holds the digits to the range as it writes them.
 *
 * Integers (pm_regex_of_int_range), in JSON's canonical forms only (no '+', no leading zero, no
 * "-0"): a range of magnitudes [a, b] splits by digit count; each count's [lo, hi] (same length)
 * is written digit by digit: equal leading digits are literals, and where they differ the rest is
 * lo's tail up to all nines, the digits strictly between with any tail, and hi's tail down from
 * all zeros. Numbers (pm_regex_number_range), written without an exponent: each side of the range
 * on its own (integer parts through the integer ranges, fractions compared digit by digit), the
 * two DFAs intersected. */
#include "engine/regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/utf8.h"

enum { RANGE_MAX_DIGITS = 19 };

/* The pattern being written; the first failure stays in e (pm_err keeps it) and stops the rest. */
typedef struct out_buf {
    pm_buf b;
    pm_err *e;
} out_buf;

static void put(out_buf *o, const char *s) {
    if (!o->e->code) pm_buf_put(&o->b, s, strlen(s), o->e);
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
    out_buf o = {{0}, e};
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
    char *p = NULL;
    if (!e->code) pm_buf_take(&o.b, &p, NULL, e);
    pm_buf_free(&o.b);
    return p;
}

/* ---- decimal numbers (pm_regex_number_range) ---- */

/* A bound as a plain decimal: sign, integer digits, fraction digits (no trailing zeros). */
typedef struct decimal {
    int neg;
    long long ip;
    char fp[48];
} decimal;

enum { MAX_FRACTION = 40 };

/* The shortest decimal that reads back as d (what the schema's author wrote, for any they would),
 * written out without an exponent. */
static int decimal_of(double d, decimal *o, pm_err *e) {
    if (!(d >= -1e18 && d <= 1e18)) return pm_errf(e, PM_EUNSUPPORTED, "number bounds beyond +/-10^18 are not supported");
    char s[64];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(s, sizeof s, "%.*e", p - 1, d);
        if (strtod(s, NULL) == d) break;
    }
    /* s = [-]D.DDDDe[+-]XX: the digits and where the point goes */
    memset(o, 0, sizeof *o);
    const char *c = s;
    if (*c == '-') o->neg = 1, c++;
    char digits[24];
    int n = 0;
    for (; *c && *c != 'e'; c++)
        if (*c != '.') digits[n++] = *c;
    int exp10 = atoi(c + 1), point = exp10 + 1; /* digits before the point */
    if (n - point > MAX_FRACTION) return pm_errf(e, PM_EUNSUPPORTED, "number bounds finer than 10^-%d are not supported", MAX_FRACTION);
    for (int i = 0; i < point; i++) o->ip = o->ip * 10 + (i < n ? digits[i] - '0' : 0);
    int f = 0;
    for (int i = point < 0 ? point : 0; i < 0; i++) o->fp[f++] = '0';
    for (int i = point > 0 ? point : 0; i < n; i++) o->fp[f++] = digits[i];
    while (f > 0 && o->fp[f - 1] == '0') f--;
    o->fp[f] = 0;
    if (o->ip == 0 && !f) o->neg = 0; /* -0 is 0 */
    return PM_OK;
}

enum { CMP_GE, CMP_GT, CMP_LE, CMP_LT };

/* Fractions F (digits after the point, at least one) against cf (no trailing zeros, non-empty):
 * at the first digit where they differ F's is larger (smaller), or F runs on past cf (GE, GT: with
 * a digit above 0 for GT), or F is a prefix of cf followed by zeros (LE; LT: a proper one). */
static void fraction_cmp(out_buf *o, const char *cf, int op) {
    int n = (int)strlen(cf), k = 0, up = op == CMP_GE || op == CMP_GT;
    char set[16];
    put_char(o, '(');
    for (int i = 0; i < n; i++) {
        int d = cf[i] - '0';
        if (up ? d == 9 : d == 0) continue;
        if (k++) put_char(o, '|');
        for (int j = 0; j < i; j++) put_char(o, cf[j]);
        snprintf(set, sizeof set, up ? "[%d-9]" : "[0-%d]", up ? d + 1 : d - 1);
        put(o, set);
        put(o, "[0-9]*");
    }
    if (up) {
        if (k++) put_char(o, '|');
        put(o, cf);
        put(o, op == CMP_GE ? "[0-9]*" : "[0-9]*[1-9][0-9]*");
    } else {
        for (int len = 1; len <= (op == CMP_LE ? n : n - 1); len++) {
            if (k++) put_char(o, '|');
            for (int j = 0; j < len; j++) put_char(o, cf[j]);
            put(o, "0*");
        }
    }
    put_char(o, ')');
}

#define ANY_FRACTION "(\\.[0-9]+)?"
#define ANY_MAGNITUDE "(0|[1-9][0-9]*)(\\.[0-9]+)?"

/* Magnitudes I(.F)? (I without leading zeros) against c (|c|). */
static void magnitude_cmp(out_buf *o, const decimal *c, int op) {
    char ip[24];
    snprintf(ip, sizeof ip, "%lld", c->ip);
    int k = 0, frac = c->fp[0] != 0;
    put_char(o, '(');
    if (op == CMP_GE || op == CMP_GT) { /* a larger integer part, any fraction */
        put(o, "(");
        magnitudes(o, c->ip + 1, -1, &k);
        put(o, ")" ANY_FRACTION "|");
        put(o, ip);
        if (op == CMP_GE && !frac) put(o, ANY_FRACTION);
        else if (!frac) put(o, "\\.0*[1-9][0-9]*");
        else {
            put(o, "\\.");
            fraction_cmp(o, c->fp, op);
        }
    } else { /* a smaller integer part, any fraction; the same one with a fraction below (none below an
              * integer c for LT: callers never ask for m < 0) */
        int same = frac || op == CMP_LE;
        if (c->ip > 0) {
            put(o, "(");
            magnitudes(o, 0, c->ip - 1, &k);
            put(o, same ? ")" ANY_FRACTION "|" : ")" ANY_FRACTION);
        }
        if (same) put(o, ip);
        if (same && !frac) put(o, "(\\.0+)?");
        else if (same) {
            put(o, "(\\.");
            fraction_cmp(o, c->fp, op);
            put(o, ")?");
        }
    }
    put_char(o, ')');
}

/* The signed numbers x op c, as text without an exponent. */
static void signed_cmp(out_buf *o, const decimal *c, int op) {
    int up = op == CMP_GE || op == CMP_GT, zero = c->ip == 0 && !c->fp[0];
    if (up && !c->neg) magnitude_cmp(o, c, op); /* x >= c >= 0: no sign */
    else if (up) {                                /* x >= c < 0: any non-negative, or -m with m <= |c| */
        put(o, "(" ANY_MAGNITUDE "|-");
        magnitude_cmp(o, c, op == CMP_GE ? CMP_LE : CMP_LT);
        put_char(o, ')');
    } else if (!c->neg && !(op == CMP_LT && zero)) { /* x <= c >= 0: any negative, or m <= c */
        put(o, "(-" ANY_MAGNITUDE "|");
        magnitude_cmp(o, c, op);
        put_char(o, ')');
    } else { /* x <= c < 0 (x < 0): -m with m >= |c| (m > |c|) */
        put_char(o, '-');
        magnitude_cmp(o, c, op == CMP_LE ? CMP_GE : CMP_GT);
    }
}

static int compile_side(const decimal *c, int op, pm_regex **out, pm_err *e) {
    out_buf o = {{0}, e};
    signed_cmp(&o, c, op);
    if (!e->code) pm_regex_compile(o.b.p, o.b.len, out, e);
    pm_buf_free(&o.b);
    return e->code;
}

int pm_regex_number_range(double lo, int has_lo, int lo_exclusive, double hi, int has_hi, int hi_exclusive, pm_regex **out, pm_err *e) {
    *out = NULL;
    decimal a, b;
    if ((has_lo && decimal_of(lo, &a, e)) || (has_hi && decimal_of(hi, &b, e))) return e->code;
    if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_exclusive || hi_exclusive))))
        return pm_errf(e, PM_EINVAL, "no number lies between %.17g and %.17g", lo, hi);
    pm_regex *x = NULL, *y = NULL;
    if (has_lo && compile_side(&a, lo_exclusive ? CMP_GT : CMP_GE, &x, e)) return e->code;
    if (has_hi && compile_side(&b, hi_exclusive ? CMP_LT : CMP_LE, &y, e)) {
        pm_regex_free(x);
        return e->code;
    }
    if (x && y) {
        pm_regex_intersect(x, y, out, e);
        pm_regex_free(x);
        pm_regex_free(y);
    } else *out = x ? x : y;
    return e->code;
}

/* ---- multiples (pm_regex_multiples) ---- */

int pm_regex_multiples(double m, int integer, pm_regex **out, pm_err *e) {
    *out = NULL;
    if (!(m > 0)) return pm_errf(e, PM_EINVAL, "multipleOf must be above 0");
    decimal dm;
    if (decimal_of(m, &dm, e)) return e->code;
    int d = (int)strlen(dm.fp);
    long long M = dm.ip;
    for (int i = 0; i < d; i++) M = M * 10 + (dm.fp[i] - '0');
    /* states: 0 dead, 1 start, 2 after '-', 3 a zero integer part; I(r) the integer part's digits so
     * far with remainder r; P(r) after the point; F(r, j) j fraction digits (1..d); Z(r) zeros past d */
    if (M > PM_REGEX_MAX_DFA || (long long)(d + 3) * M + 4 > PM_REGEX_MAX_DFA)
        return pm_errf(e, PM_EUNSUPPORTED, "multipleOf %.17g is not supported: it needs too large an automaton (%lld x %d states)", m, M,
                       d + 3);
    enum { C_OTHER, C_MINUS, C_POINT, C_DIGIT, NC = C_DIGIT + 10 };
    int R = (int)M, n = 4 + R * (d + 3);
    int I0 = 4, P0 = I0 + R, F0 = P0 + R, Z0 = F0 + R * d; /* F(r, j) = F0 + (j - 1) * R + r */
    uint8_t cls[256] = {0};
    cls['-'] = C_MINUS;
    cls['.'] = integer ? C_OTHER : C_POINT;
    for (int c = 0; c < 10; c++) cls['0' + c] = (uint8_t)(C_DIGIT + c);
    int32_t *next = calloc((size_t)n * NC, sizeof *next);
    uint8_t *acc = calloc((size_t)n, 1);
    long long *scale = malloc(sizeof *scale * (size_t)(d + 1)); /* 10^(d - j) mod M */
    if (!next || !acc || !scale) {
        free(next), free(acc), free(scale);
        return pm_errf(e, PM_ENOMEM, "out of memory for the multiples' DFA");
    }
    scale[d] = 1 % M;
    for (int j = d - 1; j >= 0; j--) scale[j] = scale[j + 1] * 10 % M;
#define T(state, c) next[(size_t)(state) * NC + (c)]
    T(1, C_MINUS) = 2;
    T(1, C_DIGIT) = 3;
    T(2, C_DIGIT) = integer ? 0 : 3; /* "-0": JSON's, but not an integer's canonical form */
    acc[3] = 1;
    if (!integer) T(3, C_POINT) = P0;
    for (int c = 1; c < 10; c++) T(1, C_DIGIT + c) = T(2, C_DIGIT + c) = I0 + (int)(c % M);
    for (int r = 0; r < R; r++) {
        acc[I0 + r] = r * scale[0] % M == 0;
        for (int c = 0; c < 10; c++) T(I0 + r, C_DIGIT + c) = I0 + (int)((r * 10LL + c) % M);
        if (integer) continue;
        T(I0 + r, C_POINT) = P0 + r;
        for (int c = 0; c < 10; c++) /* the first fraction digit */
            T(P0 + r, C_DIGIT + c) = d ? F0 + (int)((r * 10LL + c) % M) : (c ? 0 : Z0 + r);
        for (int j = 1; j <= d; j++) {
            int st = F0 + (j - 1) * R + r;
            acc[st] = r * scale[j] % M == 0;
            for (int c = 0; c < 10; c++)
                T(st, C_DIGIT + c) = j < d ? F0 + j * R + (int)((r * 10LL + c) % M) : (c ? 0 : Z0 + r);
        }
        acc[Z0 + r] = r == 0;
        T(Z0 + r, C_DIGIT) = Z0 + r;
    }
#undef T
    int rc = pm_regex_of_table(n, NC, cls, next, acc, out, e);
    free(next), free(acc), free(scale);
    return rc;
}
