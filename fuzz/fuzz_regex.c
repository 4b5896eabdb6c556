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
 *   - feeding the text in two pieces anywhere gives the state it gives whole. */
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
    pm_regex_free(rx);
    return 0;
}
