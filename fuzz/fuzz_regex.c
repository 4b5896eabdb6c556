/* fuzz_regex.c — libFuzzer harness for guided decoding's patterns (src/engine/regex.h): the parser
 * and DFA builder take request input (guided_regex, on the server's HTTP thread), and the mask walks
 * the DFA every step.
 *
 * The input is a pattern and a text separated by the first NUL byte (no NUL: all pattern, empty
 * text). Contracts:
 *   - the compiler gives a DFA or an error message, never both or neither, within its work limit;
 *   - every state the text passes through is dead (0) or live: a match, or some byte that goes on
 *     to a state that is not dead (the pruning the mask relies on: never a corner it cannot leave);
 *     a final state is a match no byte continues;
 *   - feeding the text in two pieces anywhere gives the state it gives whole;
 *   - a sequence's kept masks (pm_regex_masks: a state's own, or a kept state's that no token tells
 *     apart from it) are the fresh masks, at each of the text's first 32 states, over a vocabulary of
 *     single bytes and 2- and 3-byte tokens. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/regex.h"
#include "fuzz_util.h"

static int live(const pm_regex *rx, int32_t st) {
    if (!st || pm_regex_accepts(rx, st)) return 1;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        if (pm_regex_feed(rx, st, &c, 1)) return 1;
    }
    return 0;
}

enum { NV = 256 + 64 + 32 };

static pm_regex_vocab *small_vocab(void) {
    static char bytes[NV][3];
    static size_t len[NV];
    const char *tok[NV];
    for (int v = 0; v < NV; v++) {
        if (v < 256) bytes[v][0] = (char)v, len[v] = 1;
        else if (v < 320) bytes[v][0] = "ab01 \"xyz-.\n\xc3"[v % 13], bytes[v][1] = "ab\"0 x\xa9."[(v / 13) % 8], len[v] = 2;
        else bytes[v][0] = "ab0 "[v % 4], bytes[v][1] = "ba1x"[(v / 4) % 4], bytes[v][2] = "a0 y"[(v / 16) % 4], len[v] = 3;
        tok[v] = v == 0 ? NULL : bytes[v]; /* token 0 unusable, as a special token is */
    }
    return pm_regex_vocab_from(tok, len, NV);
}

/* The kept masks along the text's first states against fresh ones. */
static void check_kept(const pm_regex *rx, const char *text, size_t n) {
    static pm_regex_vocab *rv;
    if (!rv) rv = small_vocab();
    FUZZ_CHECK(rv != NULL);
    pm_regex_masks *m = pm_regex_masks_new(rx, rv);
    if (!m) return;
    float la[NV], lb[NV];
    uint8_t allow[NV];
    const int32_t eos = 0;
    int32_t st = pm_regex_start(rx);
    for (size_t i = 0; i <= n && i <= 32 && st; i++) {
        for (int rep = 0; rep < 2; rep++) {
            for (int v = 0; v < NV; v++) la[v] = lb[v] = 0.0f;
            pm_regex_mask(rx, st, rv, m, &eos, 1, la, allow);
            pm_regex_mask(rx, st, rv, NULL, &eos, 1, lb, allow);
            for (int v = 0; v < NV; v++) FUZZ_CHECK(isinf(la[v]) == isinf(lb[v]));
        }
        if (i < n) st = pm_regex_feed(rx, st, text + i, 1);
    }
    pm_regex_masks_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = (const char *)data;
    const char *nul = memchr(in, 0, size);
    size_t plen = nul ? (size_t)(nul - in) : size;
    const char *text = nul ? nul + 1 : in + size;
    size_t n = nul ? size - plen - 1 : 0;
    pm_regex *rx = NULL;
    pm_err e = {0};
    int rc = pm_regex_compile(in, plen, &rx, &e);
    FUZZ_CHECK(rc ? !rx && e.msg[0] : rx && !e.msg[0]);
    if (rc) return 0;
    int32_t st = pm_regex_start(rx);
    FUZZ_CHECK(st != 0 && live(rx, st));
    for (size_t i = 0; i < n && st; i++) {
        st = pm_regex_feed(rx, st, text + i, 1);
        FUZZ_CHECK(live(rx, st));
        if (st && pm_regex_final(rx, st)) {
            FUZZ_CHECK(pm_regex_accepts(rx, st));
            for (int b = 0; b < 256; b++) {
                char c = (char)b;
                FUZZ_CHECK(pm_regex_feed(rx, st, &c, 1) == 0);
            }
        }
    }
    size_t cut = n ? (size_t)data[0] % (n + 1) : 0;
    int32_t whole = pm_regex_feed(rx, pm_regex_start(rx), text, n);
    FUZZ_CHECK(whole == st);
    FUZZ_CHECK(pm_regex_feed(rx, pm_regex_feed(rx, pm_regex_start(rx), text, cut), text + cut, n - cut) == whole);
    FUZZ_CHECK(pm_regex_fullmatch(rx, text, n) == (whole && pm_regex_accepts(rx, whole)));
    check_kept(rx, text, n);
    pm_regex_free(rx);
    return 0;
}
