/* pretok.c — the pre-tokenizer: splits text with tokenizer.json's regex, run by PCRE2 (UTF + UCP, JIT).
 *
 * The reference engines (tiktoken's Rust regex, HF's Oniguruma) use Unicode 16.0 tables; PCRE2 differs in two
 * ways, both fixed by rewriting the pattern before compiling it (pm_pretok_translate):
 *   - \s: PCRE2 (UCP) also matches U+180E, which is not White_Space since Unicode 6.3. Every \s becomes the explicit
 *     White_Space class and every \S outside a class its complement.
 *   - \p{X} for the letter/mark/number categories: PCRE2 10.42 knows Unicode 14.0. The code points that joined X in
 *     15.0–16.0 (unicode_delta.c, generated) are added to each \p{X} (to the class it is in, or a new class).
 * Nothing else changes: the alternation stays ordered (leftmost-first, like the references), `\s+(?!\S)` keeps its
 * lookahead, (?i:...) folds as the references fold.
 * The widened classes make PCRE2's JIT about 3x slower, and the code points concerned (scripts added in 2022-2024)
 * are rare, so a second pattern with only the \s rewrite is compiled too and used for any text that contains none
 * of them (one cheap scan of the non-ASCII characters decides); both give identical pieces on such text.
 * Limit: a PCRE2 with tables newer than Unicode 16 would treat later additions as letters; a union cannot remove
 * them (the oracle leaves them unassigned). Debian 12's PCRE2 10.42 is Unicode 14.
 *
 * Splitting follows HF Split(behavior=Isolated): every match is a piece, so is any gap between matches; empty
 * matches are ignored. The subject is the text between two added tokens, so a lookahead stops at a special token.
 * Matching uses PCRE2_NO_UTF_CHECK (the encoder validates the text once): without it every call rescans the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"
#include "tok/unicode_delta.h"

/* White_Space as PCRE2 class items (no brackets). */
static const char WS_ITEMS[] = "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
                               "\\x{202F}\\x{205F}\\x{3000}";

static int put_s(pm_buf *b, const char *s, pm_err *e) { return pm_buf_put(b, s, strlen(s), e); }

/* The code points where the translated pattern may behave differently from the original one. */
typedef struct trig_set {
    uint32_t (*r)[2];
    size_t n, cap;
} trig_set;

static int trig_add(trig_set *t, uint32_t lo, uint32_t hi, pm_err *e) {
    if (!t) return PM_OK;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        void *p = realloc(t->r, cap * sizeof *t->r);
        if (!p) return pm_errf(e, PM_ENOMEM, "out of memory");
        t->r = p;
        t->cap = cap;
    }
    t->r[t->n][0] = lo;
    t->r[t->n][1] = hi;
    t->n++;
    return PM_OK;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sorts and merges overlapping/adjacent ranges. */
static void trig_normalize(trig_set *t) {
    if (!t->n) return;
    qsort(t->r, t->n, sizeof *t->r, cmp_range);
    size_t k = 0;
    for (size_t i = 1; i < t->n; i++) {
        if (t->r[i][0] <= t->r[k][1] + 1) {
            if (t->r[i][1] > t->r[k][1]) t->r[k][1] = t->r[i][1];
        } else {
            k++;
            t->r[k][0] = t->r[i][0];
            t->r[k][1] = t->r[i][1];
        }
    }
    t->n = k + 1;
}

static int put_ranges(pm_buf *b, const pm_udelta *d, pm_err *e) {
    char tmp[48];
    for (size_t i = 0; i < d->n; i++) {
        int n = d->ranges[i][0] == d->ranges[i][1] ? snprintf(tmp, sizeof tmp, "\\x{%X}", (unsigned)d->ranges[i][0])
                                                   : snprintf(tmp, sizeof tmp, "\\x{%X}-\\x{%X}", (unsigned)d->ranges[i][0],
                                                              (unsigned)d->ranges[i][1]);
        int rc = pm_buf_put(b, tmp, (size_t)n, e);
        if (rc) return rc;
    }
    return PM_OK;
}

/* Parses the property name after \p or \P at s (pointing after the letter): "{Name}" or a single letter. Sets the
 * name span and returns the number of bytes consumed (0 if malformed). */
static size_t prop_name(const char *s, const char **name, size_t *len) {
    if (s[0] == '{') {
        const char *end = strchr(s, '}');
        if (!end) return 0;
        *name = s + 1;
        *len = (size_t)(end - s - 1);
        return (size_t)(end - s) + 1;
    }
    if (!s[0]) return 0;
    *name = s;
    *len = 1;
    return 1;
}

/* widen = 0 only makes \s explicit (the fast pattern); trig (may be NULL) collects the widened code points. */
static int translate(const char *pat, int widen, char **out, trig_set *trig, pm_err *e) {
    pm_buf b = {0};
    int rc = PM_OK, in_class = 0;
    size_t i = 0, n = strlen(pat);
    while (i < n && !rc) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char d = pat[i + 1];
            if (d == 'p' || d == 'P') {
                const char *name;
                size_t nl, used = prop_name(pat + i + 2, &name, &nl);
                const pm_udelta *dl = used ? pm_udelta_find(name, nl) : NULL;
                if (!dl || !dl->exact || !dl->n || (d == 'P' && in_class) || !widen) { /* nothing to widen (or not expressible) */
                    size_t l = 2 + used;
                    rc = pm_buf_put(&b, pat + i, l, e);
                    i += l;
                    continue;
                }
                if (!in_class) rc = put_s(&b, d == 'p' ? "[" : "[^", e);
                if (!rc) rc = pm_buf_put(&b, "\\p", 2, e);
                if (!rc) rc = pm_buf_put(&b, pat + i + 2, used, e);
                if (!rc) rc = put_ranges(&b, dl, e);
                if (!rc && !in_class) rc = put_s(&b, "]", e);
                for (size_t k = 0; k < dl->n && !rc; k++) rc = trig_add(trig, dl->ranges[k][0], dl->ranges[k][1], e);
                i += 2 + used;
                continue;
            }
            if (d == 's' || (d == 'S' && !in_class)) {
                if (in_class) rc = put_s(&b, WS_ITEMS, e);
                else {
                    rc = put_s(&b, d == 's' ? "[" : "[^", e);
                    if (!rc) rc = put_s(&b, WS_ITEMS, e);
                    if (!rc) rc = put_s(&b, "]", e);
                }
                i += 2;
                continue;
            }
            if (d == 'Q') { /* literal text up to \E */
                const char *end = strstr(pat + i + 2, "\\E");
                size_t l = end ? (size_t)(end - (pat + i)) + 2 : n - i;
                rc = pm_buf_put(&b, pat + i, l, e);
                i += l;
                continue;
            }
            rc = pm_buf_put(&b, pat + i, 2, e); /* any other escape, copied as is */
            i += 2;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            size_t l = 1;
            if (pat[i + l] == '^') l++;
            if (pat[i + l] == ']') l++; /* a ']' first in a class is literal */
            rc = pm_buf_put(&b, pat + i, l, e);
            i += l;
            continue;
        }
        if (c == '[' && in_class && pat[i + 1] == ':') { /* POSIX class [:name:] */
            const char *end = strstr(pat + i + 2, ":]");
            size_t l = end ? (size_t)(end - (pat + i)) + 2 : 1;
            rc = pm_buf_put(&b, pat + i, l, e);
            i += l;
            continue;
        }
        if (c == ']' && in_class) in_class = 0;
        rc = pm_buf_put(&b, pat + i, 1, e);
        i++;
    }
    if (!rc) rc = pm_buf_take(&b, out, NULL, e);
    pm_buf_free(&b);
    return rc;
}

int pm_pretok_translate(const char *pat, char **out, pm_err *e) { return translate(pat, 1, out, NULL, e); }

static pcre2_code *compile(const char *pat, uint32_t extra, pm_err *e) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | extra, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        pm_errf(e, PM_EFORMAT, "pre-tokenizer regex: %s at offset %zu", (const char *)msg, (size_t)eo);
    }
    return re;
}

int pm_pretok_init(pm_pretok *pt, const char *pattern, pm_err *e) {
    memset(pt, 0, sizeof *pt);
    pt->word = compile("[\\p{L}\\p{N}_]", PCRE2_ANCHORED, e);
    if (!pt->word) return PM_EFORMAT;
    if (!pattern) return PM_OK;
    trig_set trig = {0};
    int rc = translate(pattern, 1, &pt->pattern, &trig, e);
    if (rc) {
        free(trig.r);
        return rc;
    }
    trig_normalize(&trig);
    pt->trig = trig.r;
    pt->n_trig = trig.n;
    pt->re = compile(pt->pattern, 0, e);
    if (!pt->re) return PM_EFORMAT;
    pt->jit = pcre2_jit_compile(pt->re, PCRE2_JIT_COMPLETE) == 0; /* without JIT the interpreter still works */
    if (trig.n) {
        char *fast = NULL;
        if ((rc = translate(pattern, 0, &fast, NULL, e))) return rc;
        pt->re_fast = compile(fast, 0, e);
        free(fast);
        if (!pt->re_fast) return PM_EFORMAT;
        pt->jit_fast = pcre2_jit_compile(pt->re_fast, PCRE2_JIT_COMPLETE) == 0;
    }
    return PM_OK;
}

/* 1 if valid UTF-8 s[0..n) contains a code point of the trigger set. */
static int has_trigger(const pm_pretok *pt, const uint8_t *s, size_t n) {
    if (!pt->n_trig) return 0;
    uint32_t lo = pt->trig[0][0];
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t l;
        uint32_t cp = pm_utf8_decode(s + i, n - i, &l);
        i += l;
        if (cp < lo) continue;
        size_t a = 0, b = pt->n_trig; /* last range with start <= cp */
        while (b - a > 1) {
            size_t m = (a + b) / 2;
            if (pt->trig[m][0] <= cp) a = m;
            else b = m;
        }
        if (cp <= pt->trig[a][1]) return 1;
    }
    return 0;
}

void pm_pretok_free(pm_pretok *pt) {
    pcre2_code_free(pt->re);
    pcre2_code_free(pt->re_fast);
    free(pt->trig);
    pcre2_code_free(pt->word);
    free(pt->pattern);
    memset(pt, 0, sizeof *pt);
}

int pm_pretok_is_word(const pm_pretok *pt, const uint8_t *s, size_t n) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return 0;
    size_t l = pm_utf8_len(s[0]);
    int rc = pcre2_match(pt->word, s, l <= n ? l : n, 0, PCRE2_NO_UTF_CHECK, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* One match from off; handles a JIT stack overflow by retrying with a large JIT stack, then the interpreter.
 * pcre2_jit_match is PCRE2's documented fast path (no option checks; JIT code never checks UTF). */
static int match_at(const pcre2_code *re, int jit, const uint8_t *s, size_t n, size_t off, pcre2_match_data *md,
                    pcre2_match_context **mctx, pcre2_jit_stack **jstack) {
    int rc = jit ? pcre2_jit_match(re, s, n, off, 0, md, *mctx) : pcre2_match(re, s, n, off, PCRE2_NO_UTF_CHECK, md, *mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !*jstack) {
        *mctx = pcre2_match_context_create(NULL);
        *jstack = pcre2_jit_stack_create(256 * 1024, 64 * 1024 * 1024, NULL);
        if (*mctx && *jstack) {
            pcre2_jit_stack_assign(*mctx, NULL, *jstack);
            rc = pcre2_match(re, s, n, off, PCRE2_NO_UTF_CHECK, md, *mctx);
        }
    }
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(re, s, n, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    return rc;
}

int pm_pretok_split(const pm_pretok *pt, const uint8_t *s, size_t n, pm_piece_fn fn, void *ctx, pm_err *e) {
    if (!n) return PM_OK;
    if (!pt->re) return fn(ctx, s, n, e);
    int fast = pt->re_fast && !has_trigger(pt, s, n), jit = fast ? pt->jit_fast : pt->jit;
    const pcre2_code *re = fast ? pt->re_fast : pt->re;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return pm_errf(e, PM_ENOMEM, "out of memory for regex match data");
    pcre2_match_context *mctx = NULL;
    pcre2_jit_stack *jstack = NULL;
    int rc = PM_OK;
    size_t off = 0, gap = 0; /* gap: end of the previous piece */
    while (off < n) {
        int m = match_at(re, jit, s, n, off, md, &mctx, &jstack);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            rc = pm_errf(e, PM_ELIMIT, "pre-tokenizer regex failed at byte %zu: %s", off, (const char *)msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: not a piece; look again one character later */
            if (ms >= n) break;
            off = ms + pm_utf8_len(s[ms]);
            continue;
        }
        if (ms > gap && (rc = fn(ctx, s + gap, ms - gap, e))) break;
        if ((rc = fn(ctx, s + ms, me - ms, e))) break;
        gap = off = me;
    }
    if (!rc && gap < n) rc = fn(ctx, s + gap, n - gap, e);
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(jstack);
    return rc;
}
