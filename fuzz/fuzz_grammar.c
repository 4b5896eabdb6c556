/* fuzz_grammar.c — libFuzzer harness for grammars (src/engine/grammar.h): the GBNF and Lark parsers and
 * lowering take request input (guided_grammar, on the server's HTTP thread), and the parse threads
 * run every step.
 *
 * The input is a grammar and a text separated by the first NUL byte (no NUL: all grammar, empty
 * text). Contracts:
 *   - the compiler gives a grammar or an error message, never both or neither;
 *   - feeding the text a byte at a time: each step alive (1), dead (0, and then it stays dead) or
 *     a limit (< 0, with a message); a final state is a root no byte continues;
 *   - feeding it in two pieces anywhere gives the verdict it gives whole (pm_grammar_fullmatch);
 *   - the mask over a small vocabulary of single bytes and pairs allows exactly the tokens that a
 *     feed of their bytes keeps alive (checked for every 11th token over the first 32 bytes), and
 *     leaves the state as it was;
 *   - it is the mask of a state without caches (pm_grammar_set_plain), fed the same bytes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "fuzz_util.h"

enum { NV = 256 + 64 };

static pm_grammar_vocab *small_vocab(char (*bytes)[2], size_t *len) {
    const char *tok[NV];
    for (int v = 0; v < NV; v++) {
        if (v < 256) bytes[v][0] = (char)v, len[v] = 1;
        else bytes[v][0] = "[]{}(),:\"ab01 \n\\x"[v % 17], bytes[v][1] = "ab\"[]0 ,"[(v / 17) % 8], len[v] = 2;
        tok[v] = v == 0 ? NULL : bytes[v]; /* token 0 unusable, as a special token is */
    }
    return pm_grammar_vocab_from(tok, len, NV);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = (const char *)data;
    const char *nul = memchr(in, 0, size);
    size_t glen = nul ? (size_t)(nul - in) : size;
    const char *text = nul ? nul + 1 : in + size;
    size_t n = nul ? size - glen - 1 : 0;
    pm_grammar *g = NULL;
    pm_err e = {0};
    int rc = pm_grammar_compile(in, glen, &g, &e);
    FUZZ_CHECK(rc ? !g && e.msg[0] : g && !e.msg[0]);
    if (rc) return 0;
    pm_grammar_state *st = pm_grammar_start(g, &e);
    if (!st) { /* a limit at the very start */
        FUZZ_CHECK(e.msg[0]);
        pm_grammar_free(g);
        return 0;
    }
    static char bytes[NV][2];
    static size_t len[NV];
    pm_grammar_vocab *gv = small_vocab(bytes, len);
    float logits[NV];
    uint8_t allow[NV];
    pm_err pe = {0};
    pm_grammar_state *plain = pm_grammar_start(g, &pe);
    if (plain) pm_grammar_set_plain(plain, 1);
    float plain_logits[NV];
    int alive = 1, limited = 0;
    for (size_t i = 0; i <= n && alive == 1 && i < 64; i++) {
        for (int v = 0; v < NV; v++) logits[v] = plain_logits[v] = 0;
        int32_t eos = 0;
        pm_err me = {0};
        if (pm_grammar_mask(st, gv, &eos, 1, logits, allow, &me)) {
            FUZZ_CHECK(me.msg[0]);
            limited = 1;
            break;
        }
        FUZZ_CHECK(!!isinf(logits[0]) == !pm_grammar_accepts(st));
        if (plain && !pm_grammar_mask(plain, gv, &eos, 1, plain_logits, allow, &pe))
            for (int v = 0; v < NV; v++) FUZZ_CHECK(!!isinf(logits[v]) == !!isinf(plain_logits[v]));
        /* the mask's verdict, token by token, from a fresh feed of the prefix: every 11th token over
         * the first 32 bytes (feeding each prefix again is the harness's own quadratic cost: an
         * ambiguous grammar's 64 bytes took 20 s under the sanitizers with every 7th token) */
        for (int v = 1; v < NV && i < 32; v += 11) {
            pm_grammar_state *t = pm_grammar_start(g, &me);
            if (!t) break;
            if (pm_grammar_feed(t, text, i, &me) == 1) { /* the prefix as the state saw it */
                int ok = pm_grammar_feed(t, bytes[v], len[v], &me);
                if (ok >= 0) FUZZ_CHECK(ok == !isinf(logits[v]));
            }
            pm_grammar_state_free(t);
        }
        if (i == n) break;
        alive = pm_grammar_feed(st, text + i, 1, &e);
        if (plain && pm_grammar_feed(plain, text + i, 1, &pe) != alive) { /* a limit may differ (the caches do less work) */
            FUZZ_CHECK(alive < 0 || pe.msg[0]);
            pm_grammar_state_free(plain);
            plain = NULL;
        }
        FUZZ_CHECK(alive >= 0 || e.msg[0]);
        if (alive == 1 && pm_grammar_final(st)) FUZZ_CHECK(pm_grammar_accepts(st));
    }
    if (!limited && alive >= 0 && n <= 64) {
        size_t cut = n ? (size_t)data[0] % (n + 1) : 0;
        pm_err e2 = {0};
        int whole = pm_grammar_fullmatch(g, text, n, &e2);
        pm_grammar_state *t = pm_grammar_start(g, &e2);
        if (t && whole >= 0) {
            int a = pm_grammar_feed(t, text, cut, &e2);
            if (a >= 0) a = pm_grammar_feed(t, text + cut, n - cut, &e2);
            if (a >= 0) FUZZ_CHECK(pm_grammar_accepts(t) == whole);
        }
        pm_grammar_state_free(t);
    }
    pm_grammar_vocab_free(gv);
    pm_grammar_state_free(plain);
    pm_grammar_state_free(st);
    pm_grammar_free(g);
    return 0;
}
