/* test_regex.c — guided patterns (src/engine/regex.h): whole-match verdicts on UTF-8 edges (each
 * written out here; tests/e2e/regex_diff.sh compares thousands more with Python's re), refusals
 * naming the construct and its byte, choices escaped as literals, and the mask over the real
 * tokenizer against a check written independently here: a token is allowed exactly when its bytes
 * keep the text a prefix of one of the choices, an end token exactly when the text is one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/regex.h"
#include "tok/tokenizer.h"
#include "test_util.h"

static pm_regex *compile_ok(const char *p) {
    pm_regex *rx = NULL;
    pm_err e = {0};
    if (pm_regex_compile(p, strlen(p), &rx, &e)) fail_msg("'%s' refused: %s", p, e.msg);
    return rx;
}

static void refused(const char *p, int code, const char *needle) {
    pm_regex *rx = NULL;
    pm_err e = {0};
    int rc = pm_regex_compile(p, strlen(p), &rx, &e);
    if (rc != code || !strstr(e.msg, needle)) fail_msg("'%s': %d '%s', wanted %d and '%s'", p, rc, e.msg, code, needle);
    assert_null(rx);
}

typedef struct verdict {
    const char *pattern, *text;
    int match;
} verdict;

static void test_fullmatch(void **state) {
    (void)state;
    static const verdict v[] = {
        {"abc", "abc", 1}, {"abc", "ab", 0}, {"abc", "abcd", 0}, {"a|bc", "bc", 1}, {"a|bc", "ac", 0},
        {"^(?:yes|no)$", "no", 1}, {"\\Ayes\\Z", "yes", 1}, {"", "", 1}, {"", "a", 0}, {"a*", "", 1},
        {"x{2,3}", "x", 0}, {"x{2,3}", "xxx", 1}, {"x{2,3}", "xxxx", 0}, {"x{2,}", "xxxxxxx", 1}, {"x{,2}", "", 1},
        {"x{0}", "", 1}, {"x{0}y", "y", 1}, {"a{", "a{", 1}, {"a{x}", "a{x}", 1}, {"a{1,2", "a{1,2", 1}, {"}", "}", 1},
        {"]", "]", 1}, {"[]a]+", "]a]", 1}, {"[^]a]", "b", 1}, {"[^]a]", "]", 0}, {"[a-]", "-", 1}, {"[-a]", "-", 1},
        {"\\d+\\.\\d{2}", "12.50", 1}, {"\\d", "\xd9\xa3", 0}, /* ASCII digits only */
        {"\\w+", "a_Z9", 1}, {"\\W", "\xc3\xa9", 1}, {"\\s", "\t", 1}, {"\\S", " ", 0}, {"[\\s\\d]+", " 1\n2", 1},
        {".", "\n", 0}, {".", "\xf0\x9f\x98\x80", 1}, {".", "\xc3", 0}, {"..", "\xf0\x9f\x98\x80", 0},
        {"[^a]", "\n", 1}, {"[^a]", "\xe2\x82\xac", 1}, {"[^\\x00-\\x7f]", "\xc3\xa9", 1}, {"[^\\x00-\\x7f]", "e", 0},
        {"[\xce\xb1-\xcf\x89]{2}", "\xce\xb2\xce\xb3", 1}, {"[\xce\xb1-\xcf\x89]", "\xce\x91", 0},
        {"[\\u0800-\\U0010FFFF]", "\xe0\xa0\x80", 1}, {"[\\u0800-\\U0010FFFF]", "\xf4\x8f\xbf\xbf", 1},
        {"[\\u0800-\\U0010FFFF]", "\xdf\xbf", 0}, {"[\\u0800-\\U0010FFFF]", "\xed\xa0\x80", 0}, /* no surrogate */
        {"\\u00e9", "\xc3\xa9", 1}, {"\\x41\\101", "AA", 1}, {"\\x41\\060", "A0", 1}, {"\\.\\*\\?", ".*?", 1},
        {"(?P<year>\\d{4})-(?<m>\\d\\d)", "2026-12", 1}, {"(a|b)*?c", "abac", 1}, {"a+?", "aaa", 1},
        {"(ab|a)(bc|c)", "abc", 1}, {"((a*)*)*b", "aaab", 1}, {"[\\b]", "\b", 1}, {"\\n\\t\\r\\f\\v\\a", "\n\t\r\f\v\a", 1},
        /* inline flags: i folds ASCII letters only (re.ASCII), before a class's negation; s lets `.` take \n;
         * scoped ones end with their group, global ones stand at the start */
        {"(?i:ab)c", "ABc", 1}, {"(?i:ab)c", "abC", 0}, {"(?i:[a-c]+)", "bCa", 1}, {"(?i:[^a])", "A", 0}, {"(?i:[^a])", "b", 1},
        {"(?i:\xc3\xa9)", "\xc3\x89", 0}, {"(?i)x(?-i:y)z", "XyZ", 1}, {"(?i)x(?-i:y)z", "XYZ", 0}, {"(?i)^ab$", "aB", 1},
        {"(?s:.)", "\n", 1}, {"(?s:.).", "\n\n", 0}, {"(?is)a.", "A\n", 1}, {"(?i)(?s)a.", "A\n", 1}, {"(?m:a)", "a", 1},
        {"(?i:a)|b", "B", 0}, {"(?i-s:a.)", "A\n", 0},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        pm_regex *rx = compile_ok(v[i].pattern);
        if (pm_regex_fullmatch(rx, v[i].text, strlen(v[i].text)) != v[i].match)
            fail_msg("'%s' on '%s': wanted %d", v[i].pattern, v[i].text, v[i].match);
        pm_regex_free(rx);
    }
}

/* The ECMAScript dialect as JSON Schema's pattern uses it: a match anywhere unless anchored, `.`
 * without \r or U+2028, `\s` with Unicode's spaces, `[]` empty and `[^]` any character. */
static void test_ecma_search(void **state) {
    (void)state;
    static const verdict v[] = {
        {"b+", "abba", 1}, {"b+", "ac", 0}, {"^ab", "abc", 1}, {"^ab", "cab", 0}, {"ab$", "cab", 1}, {"ab$", "abc", 0},
        {"^(?:a|b)$", "b", 1}, {"^(?:a|b)$", "ab", 0}, {"a.c", "a\rc", 0}, {"a.c", "a\tc", 1}, {"a.c", "a\xe2\x80\xa8" "c", 0},
        {"a\\sc", "a\xe3\x80\x80" "c", 1}, {"a\\Sc", "a\xc2\xa0" "c", 0}, {"a[^]c", "a\nc", 1}, {"x|a[]c", "ac", 0}, {"x|a[]c", "zxz", 1},
        {"", "anything", 1}, {"^$", "", 1}, {"^$", "a", 0},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        pm_regex *rx = NULL;
        pm_err e = {0};
        if (pm_regex_compile_flags(v[i].pattern, strlen(v[i].pattern), PM_REGEX_SEARCH | PM_REGEX_ECMA, &rx, &e))
            fail_msg("'%s' refused: %s", v[i].pattern, e.msg);
        if (pm_regex_fullmatch(rx, v[i].text, strlen(v[i].text)) != v[i].match)
            fail_msg("'%s' searched in '%s': wanted %d", v[i].pattern, v[i].text, v[i].match);
        pm_regex_free(rx);
    }
    pm_regex *rx = NULL;
    pm_err e = {0};
    assert_int_equal(pm_regex_compile_flags("^a|b", 4, PM_REGEX_SEARCH, &rx, &e), PM_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "group the alternatives"));
    /* JSON text: the characters only \u writes are gone from every set */
    e = (pm_err){0};
    assert_int_equal(pm_regex_compile_flags("[\\x00-\\x1f]", 11, PM_REGEX_JSON_TEXT, &rx, &e), 0);
    assert_true(pm_regex_fullmatch(rx, "\n", 1) && pm_regex_fullmatch(rx, "\t", 1) && pm_regex_fullmatch(rx, "\b", 1));
    assert_false(pm_regex_fullmatch(rx, "\x01", 1) || pm_regex_fullmatch(rx, "\x0b", 1) || pm_regex_fullmatch(rx, "\x1f", 1));
    pm_regex_free(rx);
}

/* The product of two DFAs takes exactly the texts both take; an empty product is refused. */
static void test_intersect(void **state) {
    (void)state;
    pm_regex *a = compile_ok("a+b*"), *b = compile_ok("[\\s\\S]{2,3}"), *both = NULL, *none = NULL;
    pm_err e = {0};
    assert_int_equal(pm_regex_intersect(a, b, &both, &e), 0);
    const char *texts[] = {"", "a", "b", "aa", "ab", "ba", "aab", "abb", "aaa", "aaaa", "abbb", "\xc3\xa9\xc3\xa9"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        size_t n = strlen(texts[i]);
        assert_int_equal(pm_regex_fullmatch(both, texts[i], n), pm_regex_fullmatch(a, texts[i], n) && pm_regex_fullmatch(b, texts[i], n));
    }
    pm_regex *c = compile_ok("b{4,}");
    assert_int_equal(pm_regex_intersect(b, c, &none, &e), PM_EINVAL);
    assert_null(none);
    assert_non_null(strstr(e.msg, "no text"));
    pm_regex_free(a);
    pm_regex_free(b);
    pm_regex_free(c);
    pm_regex_free(both);
}

static void test_refusals(void **state) {
    (void)state;
    refused("(ab", PM_EINVAL, "group opened at byte 0 is never closed");
    refused("ab)", PM_EINVAL, "unbalanced parenthesis at byte 2");
    refused("a|*b", PM_EINVAL, "nothing to repeat at byte 2");
    refused("x{2}{3}", PM_EINVAL, "multiple repeat at byte 4");
    refused("[b-a]", PM_EINVAL, "bad character range at byte 1");
    refused("[abc", PM_EINVAL, "class opened at byte 0");
    refused("ab\\", PM_EINVAL, "lone backslash");
    refused("\\q", PM_EINVAL, "bad escape \\q at byte 0");
    refused("\\x4g", PM_EINVAL, "hexadecimal");
    refused("x{3,2}", PM_EINVAL, "maximum below its minimum");
    refused("\xff", PM_EINVAL, "not valid UTF-8 at byte 0");
    refused("[^\\x00-\\U0010FFFF]", PM_EINVAL, "matches no text");
    refused("a\\b", PM_EUNSUPPORTED, "word boundary (\\b at byte 1)");
    refused("(a)\\1", PM_EUNSUPPORTED, "back-reference");
    refused("\\400", PM_EINVAL, "octal escape at byte 0");
    refused("a(?!b)", PM_EUNSUPPORTED, "lookaround (the group at byte 1)");
    refused("(?x)a", PM_EUNSUPPORTED, "inline flag 'x' at byte 2");
    refused("a(?i)b", PM_EINVAL, "global flags at byte 1 must stand at the pattern's start");
    refused("(?i-i:a)", PM_EINVAL, "'i' at byte 4 is turned both on and off");
    refused("(?-:a)", PM_EINVAL, "turns nothing off");
    refused("(?i", PM_EINVAL, "flags group at byte 0 is never closed");
    refused("(?#c)a", PM_EUNSUPPORTED, "group construct at byte 0");
    refused("a*+", PM_EUNSUPPORTED, "possessive");
    refused("a^", PM_EUNSUPPORTED, "anchor '^' at byte 1");
    refused("a$b", PM_EUNSUPPORTED, "anchor '$' at byte 1");
    refused("x{1001}", PM_EUNSUPPORTED, "above 1000");
    refused(".*a.{16}", PM_EUNSUPPORTED, "too large"); /* 2^16 states: the classic blow-up */
}

static void test_choices(void **state) {
    (void)state;
    const char *c[] = {"a.b", "(x|y)*", "", "\xc3\xa9t\xc3\xa9", "c\\d"};
    pm_err e = {0};
    char *p = pm_regex_of_choices(c, 5, &e);
    assert_non_null(p);
    pm_regex *rx = compile_ok(p);
    free(p);
    for (int i = 0; i < 5; i++) assert_true(pm_regex_fullmatch(rx, c[i], strlen(c[i])));
    const char *not[] = {"axb", "x", "xy", "c1", "c\\", "a.", "\xc3\xa9t"};
    for (int i = 0; i < 7; i++) assert_false(pm_regex_fullmatch(rx, not[i], strlen(not[i])));
    /* "a." is no whole choice but goes on; "ax" can become none */
    assert_true(pm_regex_feed(rx, pm_regex_start(rx), "a.", 2) != 0);
    assert_int_equal(pm_regex_feed(rx, pm_regex_start(rx), "ax", 2), 0);
    int32_t st = pm_regex_feed(rx, pm_regex_start(rx), "a.b", 3);
    assert_true(pm_regex_accepts(rx, st) && pm_regex_final(rx, st));
    st = pm_regex_start(rx); /* "" is a choice, and others follow it */
    assert_true(pm_regex_accepts(rx, st) && !pm_regex_final(rx, st));
    pm_regex_free(rx);
}

/* Whether text[0, n) is a prefix of one of the choices; *whole: it is one. */
static int prefix_of_choice(const char *const *c, int nc, const char *text, size_t n, int *whole) {
    int any = 0;
    *whole = 0;
    for (int i = 0; i < nc; i++)
        if (strlen(c[i]) >= n && !memcmp(c[i], text, n)) any = 1, *whole |= strlen(c[i]) == n;
    return any;
}

static void test_mask(void **state) {
    (void)state;
    pm_tokenizer *tok = tu_fixture_tokenizer();
    assert_non_null(tok);
    int V = pm_tok_vocab_size(tok) + 40; /* ids past the tokenizer's: masked */
    const int32_t eos[2] = {200020, 199999};
    pm_err e = {0};
    const char *c[] = {"Paris", "Par", "Lyon", "Saint-\xc3\x89tienne", " Paris"};
    char *p = pm_regex_of_choices(c, 5, &e);
    pm_regex *rx = compile_ok(p);
    free(p);
    pm_regex_vocab *rv = pm_regex_vocab_new(tok, V);
    assert_non_null(rv);
    float *lg = malloc(sizeof(float) * (size_t)V);
    uint8_t *allow = malloc((size_t)V);
    const char *texts[] = {"", "P", "Par", "Pari", "Paris", "Saint-\xc3", "Saint-\xc3\x89tienn", " "};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        int32_t st = pm_regex_feed(rx, pm_regex_start(rx), texts[k], strlen(texts[k]));
        assert_true(st != 0);
        for (int v = 0; v < V; v++) lg[v] = 0.0f;
        pm_regex_mask(rx, st, rv, NULL, eos, 2, lg, allow);
        int kept = 0, whole;
        for (int v = 0; v < V; v++) {
            size_t len = 0;
            const char *b = v < pm_tok_vocab_size(tok) && !pm_tok_is_special(tok, v) ? pm_tok_token_bytes(tok, v, &len) : NULL;
            int want;
            if (v == eos[0] || v == eos[1]) {
                prefix_of_choice(c, 5, texts[k], strlen(texts[k]), &whole);
                want = whole;
            } else if (!b || !len)
                want = 0;
            else {
                char buf[256];
                size_t tl = strlen(texts[k]);
                want = tl + len < sizeof buf;
                if (want) {
                    memcpy(buf, texts[k], tl);
                    memcpy(buf + tl, b, len);
                    want = prefix_of_choice(c, 5, buf, tl + len, &whole);
                }
            }
            if (want != !isinf(lg[v])) fail_msg("after '%s', token %d ('%.*s'): wanted %d", texts[k], v, (int)len, b ? b : "", want);
            kept += want;
        }
        assert_true(kept > 0);
    }
    /* past a final match: only the end tokens */
    int32_t st = pm_regex_feed(rx, pm_regex_start(rx), "Lyon", 4);
    assert_true(pm_regex_final(rx, st));
    for (int v = 0; v < V; v++) lg[v] = 0.0f;
    pm_regex_mask(rx, st, rv, NULL, eos, 2, lg, allow);
    for (int v = 0; v < V; v++) assert_int_equal(!isinf(lg[v]), v == eos[0] || v == eos[1]);
    free(lg);
    free(allow);
    pm_regex_vocab_free(rv);
    pm_regex_free(rx);
    pm_tok_free(tok);
}

/* A sequence's kept masks (pm_regex_masks) give what a fresh mask gives: at every prefix of texts
 * whose states recur (words and spaces) and of one whose states do not (a count past
 * PM_REGEX_MASKS: slots taken over), each mask taken twice; and along counts longer than the
 * longest token (128 bytes here), whose states keep the same tokens until the count's end comes
 * within a token's reach, and then do not (a kept state's mask reused only while they do; UTF-8
 * sequences and a count of two-character units among them). */
static void test_mask_kept(void **state) {
    (void)state;
    pm_tokenizer *tok = tu_fixture_tokenizer();
    assert_non_null(tok);
    int V = pm_tok_vocab_size(tok);
    const int32_t eos[2] = {200020, 199999};
    pm_regex_vocab *rv = pm_regex_vocab_new(tok, V);
    assert_non_null(rv);
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    uint8_t *allow = malloc((size_t)V);
    const char *cases[][2] = {{"\\w+( \\w+)*\\.", "Once upon a time there was a cat."},
                              {"[a-z]{0,40}!", "abcdefghijklmnopqrstuvwxyzabcdefghij!"},
                              {"(ab|a)*c", "abaababac"},
                              {"[^\"]{0,150}\"", "Once upon a time, in a land far away (très loin, 遠く), there lived a cat who loved the "
                                                 "sea and the sand, and every morning she walked to the shore.\""},
                              {"(a|bc){0,90}!", "abcbcaabcabcbcbcaaabcabcbcaabcabcbcbcaaabcabcbcaabcabcbcbcaaabcabcbcaabcabcbcbcaaabcabc!"}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        pm_regex *rx = compile_ok(cases[c][0]);
        pm_regex_masks *m = pm_regex_masks_new(rx, rv);
        assert_non_null(m);
        const char *text = cases[c][1];
        int32_t st = pm_regex_start(rx);
        for (size_t k = 0; k <= strlen(text); k++) {
            for (int rep = 0; rep < 2; rep++) {
                for (int v = 0; v < V; v++) la[v] = lb[v] = 0.0f;
                pm_regex_mask(rx, st, rv, m, eos, 2, la, allow);
                pm_regex_mask(rx, st, rv, NULL, eos, 2, lb, allow);
                for (int v = 0; v < V; v++)
                    if (isinf(la[v]) != isinf(lb[v])) fail_msg("'%s' after %zu bytes (mask %d): token %d kept %d, fresh %d", cases[c][0], k, rep, v, !isinf(la[v]), !isinf(lb[v]));
            }
            if (k < strlen(text)) st = pm_regex_feed(rx, st, text + k, 1);
            assert_true(st != 0);
        }
        pm_regex_masks_free(m);
        pm_regex_free(rx);
    }
    free(la);
    free(lb);
    free(allow);
    pm_regex_vocab_free(rv);
    pm_tok_free(tok);
}

/* Integer ranges (pm_regex_of_int_range): for bounds on either side, one-sided and none, negative,
 * zero and 18-digit ones, every integer near the bounds and near 0 and each power of ten's edges
 * matches exactly when it lies in the range (the arithmetic is the oracle), in JSON's canonical
 * form only; an empty range and bounds past 10^18 are refused. */
static int range_case(long long lo, int has_lo, long long hi, int has_hi, long long x) {
    return (!has_lo || x >= lo) && (!has_hi || x <= hi);
}
static void check_range(long long lo, int has_lo, long long hi, int has_hi) {
    pm_err e = {0};
    char *p = pm_regex_of_int_range(lo, has_lo, hi, has_hi, &e);
    if (!p) fail_msg("range [%lld %d, %lld %d]: %s", lo, has_lo, hi, has_hi, e.msg);
    pm_regex *rx = NULL;
    if (pm_regex_compile(p, strlen(p), &rx, &e)) fail_msg("range pattern %s: %s", p, e.msg);
    long long probe[4096];
    int n = 0;
    long long centers[3] = {lo, hi, 0};
    for (int c = 0; c < 3; c++)
        for (long long d = -120; d <= 120; d++) probe[n++] = centers[c] + d;
    for (long long t = 1; t <= 100000000000000000LL; t *= 10) /* each power of ten's edges, both signs */
        for (long long d = -2; d <= 2; d++) probe[n++] = t + d, probe[n++] = -(t + d);
    for (int i = 0; i < n; i++) {
        char s[32];
        snprintf(s, sizeof s, "%lld", probe[i]);
        int want = range_case(lo, has_lo, hi, has_hi, probe[i]);
        if (pm_regex_fullmatch(rx, s, strlen(s)) != want)
            fail_msg("range [%lld %d, %lld %d]: %s %s (pattern %s)", lo, has_lo, hi, has_hi, s, want ? "refused" : "taken", p);
    }
    /* never a non-canonical spelling */
    const char *odd[] = {"", "-", "+1", "-0", "00", "01", "-01", "1.0", "1e2", " 1"};
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) assert_false(pm_regex_fullmatch(rx, odd[i], strlen(odd[i])));
    /* past 19 digits: only an open end takes them */
    assert_int_equal(pm_regex_fullmatch(rx, "12345678901234567890", 20), !has_hi);
    assert_int_equal(pm_regex_fullmatch(rx, "-12345678901234567890", 21), !has_lo);
    pm_regex_free(rx);
    free(p);
}
static void test_int_ranges(void **state) {
    (void)state;
    const long long b[] = {0, 1, 5, 9, 10, 13, 99, 100, 101, 123, 4567, 99999, 100000, 987654321, 999999999999999999LL, 1000000000000000000LL};
    int nb = (int)(sizeof b / sizeof *b);
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < nb; j++)
            for (int si = -1; si <= 1; si += 2)
                for (int sj = -1; sj <= 1; sj += 2) {
                    long long lo = si * b[i], hi = sj * b[j];
                    if (lo <= hi) check_range(lo, 1, hi, 1);
                }
    for (int i = 0; i < nb; i++)
        for (int si = -1; si <= 1; si += 2) {
            check_range(si * b[i], 1, 0, 0);
            check_range(0, 0, si * b[i], 1);
        }
    check_range(0, 0, 0, 0);
    pm_err e = {0};
    assert_null(pm_regex_of_int_range(5, 1, 4, 1, &e));
    assert_int_equal(e.code, PM_EINVAL);
    pm_err e2 = {0};
    assert_null(pm_regex_of_int_range(0, 0, 1000000000000000001LL, 1, &e2));
    assert_int_equal(e2.code, PM_EUNSUPPORTED);
}

/* Number ranges (pm_regex_number_range): random bounds of a few digits (either side, exclusive or
 * not, negative, zero, fractions) against numbers written near them and elsewhere; the oracle is
 * strtod's order (exact for these short decimals): a plain decimal matches exactly when it lies in
 * the range ("-0" forms: never out of it), an exponent, a leading zero or a bare point never. */
static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}
static double random_bound(char *text) {
    static const char *const ints[] = {"0", "1", "2", "9", "10", "12", "99", "100", "150", "1000"};
    static const char *const fracs[] = {"", ".5", ".25", ".05", ".001", ".9", ".99", ".1", ".125", ".75"};
    sprintf(text, "%s%s%s", rng_next() % 3 == 0 ? "-" : "", ints[rng_next() % 10], fracs[rng_next() % 10]);
    return strtod(text, NULL);
}
static void candidate(const char *near, char *out) {
    static const char *const tails[] = {"", "0", "1", "5", "9", "00", "01", "49", "51", "999"};
    switch (rng_next() % 4) {
    case 0: /* the bound itself, and small changes of its last digits */
        sprintf(out, "%s%s", near, strchr(near, '.') ? tails[rng_next() % 10] : "");
        break;
    case 1: { /* another integer part */
        long long v = (long long)(rng_next() % 2001) - 1000;
        sprintf(out, "%lld", v);
        if (rng_next() % 2) sprintf(out + strlen(out), ".%s", tails[1 + rng_next() % 9]);
        break;
    }
    case 2: { /* a digit of the bound changed */
        strcpy(out, near);
        size_t n = strlen(out), at = rng_next() % n;
        if (out[at] >= '0' && out[at] <= '9') out[at] = (char)('0' + rng_next() % 10);
        break;
    }
    default: /* near zero */
        sprintf(out, "%s0.%s", rng_next() % 2 ? "-" : "", tails[1 + rng_next() % 9]);
    }
}
static int canonical(const char *x) {
    const char *c = x + (*x == '-');
    if (!(*c >= '0' && *c <= '9') || (*c == '0' && c[1] >= '0' && c[1] <= '9')) return 0;
    while (*c >= '0' && *c <= '9') c++;
    if (*c == '.') {
        if (!(c[1] >= '0' && c[1] <= '9')) return 0;
        for (c++; *c >= '0' && *c <= '9';) c++;
    }
    return *c == 0;
}
/* pm_regex_multiples against arithmetic: a number written N / 10^f is a multiple of M / 10^d when
 * N * 10^d is divisible by M * 10^f; the syntax as the bounds' (no exponent, no leading zero). */
static void test_multiples(void **state) {
    (void)state;
    static const struct {
        const char *text;
        long long M;
        int d;
    } ms[] = {{"3", 3, 0}, {"7", 7, 0}, {"0.5", 5, 1}, {"0.25", 25, 2}, {"0.01", 1, 2}, {"2.5", 25, 1}, {"0.001", 1, 3},
              {"12", 12, 0}, {"0.3", 3, 1}, {"1", 1, 0}, {"1.75", 175, 2}};
    char buf[64];
    unsigned seed = 12345;
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        for (int integer = 0; integer < 2; integer++) {
            pm_regex *rx = NULL;
            pm_err e = {0};
            if (pm_regex_multiples(strtod(ms[i].text, NULL), integer, &rx, &e)) fail_msg("multipleOf %s: %s", ms[i].text, e.msg);
            for (int k = 0; k < 3000; k++) {
                seed = seed * 1103515245u + 12345u;
                long long ip = (long long)((seed >> 8) % 2001) - 1000;
                seed = seed * 1103515245u + 12345u;
                int f = integer ? 0 : (int)((seed >> 8) % 5), zeros = (int)((seed >> 12) % 3);
                seed = seed * 1103515245u + 12345u;
                long long fp = f ? (long long)((seed >> 8) % 10000) % (long long)pow(10, f) : 0;
                if (k % 7 == 0) fp = 0; /* round values more often: more of them are multiples */
                int neg = ip < 0 || (ip == 0 && k % 11 == 1 && !integer);
                int n = snprintf(buf, sizeof buf, "%s%lld", neg ? "-" : "", ip < 0 ? -ip : ip);
                if (f) n += snprintf(buf + n, sizeof buf - (size_t)n, ".%0*lld%.*s", f, fp, zeros, "000");
                long long N = (ip < 0 ? -ip : ip), p10 = 1;
                for (int j = 0; j < f; j++) N *= 10, p10 *= 10;
                N += fp;
                int ff = f + (f ? zeros : 0);
                for (int j = f; j < ff; j++) N *= 10, p10 *= 10;
                long long lhs = N, rhs = ms[i].M;
                for (int j = 0; j < ms[i].d; j++) lhs *= 10;
                rhs *= p10;
                int want = lhs % rhs == 0;
                if (pm_regex_fullmatch(rx, buf, (size_t)n) != want)
                    fail_msg("multipleOf %s%s on %s: wanted %d", ms[i].text, integer ? " (integer)" : "", buf, want);
            }
            static const char *const bad[] = {"05", "00", "1.", ".5", "+3", "1e3", "3 ", "--3", "1.0e0", ""};
            for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) assert_false(pm_regex_fullmatch(rx, bad[b], strlen(bad[b])));
            assert_int_equal(pm_regex_fullmatch(rx, "-0", 2), !integer); /* JSON's -0; not an integer's canonical form */
            assert_true(pm_regex_fullmatch(rx, "0", 1));
            if (integer) assert_false(pm_regex_fullmatch(rx, "0.0", 3));
            pm_regex_free(rx);
        }
    }
    pm_regex *rx = NULL;
    pm_err e = {0};
    assert_int_equal(pm_regex_multiples(0, 0, &rx, &e), PM_EINVAL);
    e = (pm_err){0};
    assert_int_equal(pm_regex_multiples(-2, 0, &rx, &e), PM_EINVAL);
    e = (pm_err){0};
    assert_int_equal(pm_regex_multiples(1e6 + 1, 1, &rx, &e), PM_EUNSUPPORTED); /* a million states */
    assert_true(strstr(e.msg, "too large an automaton") != NULL);
    assert_null(rx);
}

static void test_number_ranges(void **state) {
    (void)state;
    for (int t = 0; t < 400; t++) {
        char ls[32], hs[32];
        double lo = random_bound(ls), hi = random_bound(hs);
        int has_lo = rng_next() % 4 != 0, has_hi = rng_next() % 4 != 0, lx = rng_next() % 2, hx = rng_next() % 2;
        if (!has_lo && !has_hi) has_lo = 1;
        if (has_lo && has_hi && (lo > hi || (lo == hi && (lx || hx)))) {
            pm_err e = {0};
            pm_regex *none = NULL;
            assert_int_equal(pm_regex_number_range(lo, 1, lx, hi, 1, hx, &none, &e), PM_EINVAL);
            continue;
        }
        pm_regex *rx = NULL;
        pm_err e = {0};
        if (pm_regex_number_range(lo, has_lo, lx, hi, has_hi, hx, &rx, &e)) fail_msg("[%s, %s]: %s", ls, hs, e.msg);
        for (int k = 0; k < 300; k++) {
            char x[64];
            candidate(k % 2 ? ls : hs, x);
            double v = strtod(x, NULL);
            int in = (!has_lo || (lx ? v > lo : v >= lo)) && (!has_hi || (hx ? v < hi : v <= hi));
            int neg_zero = x[0] == '-' && v == 0, got = pm_regex_fullmatch(rx, x, strlen(x));
            int want = canonical(x) && in;
            if (neg_zero ? got && !want : got != want)
                fail_msg("%s%s, %s%s: '%s' %s", lx ? "(" : "[", has_lo ? ls : "-inf", has_hi ? hs : "inf", hx ? ")" : "]", x,
                         got ? "taken" : "refused");
        }
        const char *never[] = {"1e2", "-1e-2", "01", "1.", ".5", "+1", "", "-"};
        for (size_t i = 0; i < sizeof never / sizeof *never; i++) assert_false(pm_regex_fullmatch(rx, never[i], strlen(never[i])));
        pm_regex_free(rx);
    }
    /* the shortest decimal of a bound: 0.1 takes "0.1", not only 0.1000000000000000055... and above */
    pm_regex *rx = NULL;
    pm_err e = {0};
    assert_int_equal(pm_regex_number_range(0.1, 1, 0, 0.3, 1, 0, &rx, &e), 0);
    assert_true(pm_regex_fullmatch(rx, "0.1", 3) && pm_regex_fullmatch(rx, "0.3", 3) && pm_regex_fullmatch(rx, "0.30000", 7));
    assert_false(pm_regex_fullmatch(rx, "0.30001", 7) || pm_regex_fullmatch(rx, "0.09", 4));
    pm_regex_free(rx);
    assert_int_equal(pm_regex_number_range(1e-5, 1, 0, 0, 0, 0, &rx, &e), 0);
    assert_true(pm_regex_fullmatch(rx, "0.00001", 7) && !pm_regex_fullmatch(rx, "0.000009", 8));
    pm_regex_free(rx);
    pm_err e2 = {0};
    assert_int_equal(pm_regex_number_range(0, 0, 0, 2e18, 1, 0, &rx, &e2), PM_EUNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fullmatch),
        cmocka_unit_test(test_ecma_search),
        cmocka_unit_test(test_intersect),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_choices),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_mask_kept),
        cmocka_unit_test(test_int_ranges),
        cmocka_unit_test(test_number_ranges),
        cmocka_unit_test(test_multiples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
