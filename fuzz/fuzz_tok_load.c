/* fuzz_tok_load.c — libFuzzer harness for tokenizer.json loading (src/tok/load.c, json_scan.c,
 * the pre-tokenizer regex translation and PCRE2 compile of a file-supplied pattern).
 *
 * Each input is written as tokenizer.json into a scratch checkpoint directory and loaded with
 * pm_tok_load. A loaded tokenizer is then exercised: a fixed mixed-script text (with a special
 * token) is encoded with and without special matching and decoded, every id below 2048 is looked
 * up (pm_tok_token_bytes, pm_tok_is_special) and the token texts are fed back through pm_tok_id.
 * Seeds (fuzz/make_corpus.sh): a cut-down copy of the fixture's tokenizer.json (first 300 vocab
 * entries and the merges among them, all added tokens) and hand-written minimal ones. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tok/tokenizer.h"
#include "tok/utf8.h"

static const char *dir;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    dir = fuzz_scratch();
    return 0;
}

static const char SAMPLE[] = "Hello, world! It's 2024 \xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80\n\n  x<|endoftext|>y"
                             "\xff\xfe tail";

static void exercise(const pm_tokenizer *t) {
    pm_err e = {0};
    int32_t vs = pm_tok_vocab_size(t);
    FUZZ_CHECK(vs >= 1);
    for (int sp = 0; sp <= 1; sp++) {
        int32_t *ids = NULL;
        size_t n = 0;
        memset(&e, 0, sizeof e);
        if (pm_tok_encode(t, SAMPLE, sizeof SAMPLE - 1, sp, &ids, &n, &e) == PM_OK) {
            for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < vs);
            char *text = NULL;
            size_t tl = 0;
            if (pm_tok_decode(t, ids, n, sp, &text, &tl, &e) == PM_OK) {
                FUZZ_CHECK(text != NULL && pm_utf8_valid_prefix((const uint8_t *)text, tl) == tl);
                free(text);
            }
            free(ids);
        } else {
            FUZZ_CHECK(ids == NULL || n == 0);
            free(ids);
        }
    }
    int32_t lim = vs < 2048 ? vs : 2048;
    for (int32_t id = -1; id <= lim; id++) {
        size_t bl = 0;
        const char *b = pm_tok_token_bytes(t, id, &bl);
        (void)pm_tok_is_special(t, id);
        if (!b) {
            FUZZ_CHECK(bl == 0);
            continue;
        }
        volatile char sink = bl ? b[bl - 1] : 0;
        (void)sink;
    }
    FUZZ_CHECK(pm_tok_id(t, "") < vs);
    FUZZ_CHECK(pm_tok_id(t, "<|endoftext|>") < vs);
    FUZZ_CHECK(pm_tok_id(t, "\xc4\xa0the") < vs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write_file(dir, "tokenizer.json", data, size);
    pm_tokenizer *t = NULL;
    pm_err e = {0};
    if (pm_tok_load(&t, dir, &e) == PM_OK) {
        FUZZ_CHECK(t != NULL);
        exercise(t);
        pm_tok_free(t);
    } else {
        FUZZ_CHECK(t == NULL && e.code < 0 && e.msg[0]);
    }
    return 0;
}
