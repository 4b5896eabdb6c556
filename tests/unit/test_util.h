/* test_util.h — what the unit tests share: where the fixtures are, reading a whole file, a seeded
 * stream of floats and bf16 weight matrices drawn from it. Each test program is one translation unit,
 * so everything here is static inline. */
#ifndef PM_TEST_UTIL_H
#define PM_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/safetensors.h"
#include "nn/ops.h"
#include "tok/tokenizer.h"

/* The fixture root: $PHI4MM_FIXTURES, or ../shared/fixtures where it is unset or empty (as the
 * Makefile, the e2e scripts and `phi4mm parity` read it). */
static inline const char *tu_fixtures(void) {
    const char *d = getenv("PHI4MM_FIXTURES");
    return d && *d ? d : "../shared/fixtures";
}

/* The fixture's real tokenizer.json (Phi-4's vocabulary), NULL where it cannot be loaded. */
static inline pm_tokenizer *tu_fixture_tokenizer(void) {
    char path[2048];
    snprintf(path, sizeof path, "%s/phi4mm-tiny/tiny_model/tokenizer.json", tu_fixtures());
    pm_tokenizer *tok = NULL;
    pm_err e = {0};
    if (pm_tok_load_file(&tok, path, &e)) fprintf(stderr, "%s: %s\n", path, e.msg);
    return tok;
}

/* A whole file, with one spare byte after it (callers may NUL-terminate); NULL (and *len 0) where it
 * cannot be opened or read. */
static inline uint8_t *tu_slurp(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    long n = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    uint8_t *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && (fseek(f, 0, SEEK_SET) || fread(b, 1, (size_t)n, f) != (size_t)n)) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) *len = (size_t)n;
    return b;
}

/* The next float of a seeded LCG, uniform in [-1, 1): the same stream on every machine. */
static inline float tu_frand_next(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return ((*state >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

/* An out x in bf16 matrix of rnd() values (every outlier_every-th one 8x larger where outlier_every
 * > 0), in a fresh *store with 64 spare bytes, wrapped as a tensor named "w". */
static inline pm_tensor tu_bf16_matrix(int out, int in, float (*rnd)(void), int outlier_every, uint16_t **store) {
    *store = malloc((size_t)out * in * 2 + 64);
    for (int i = 0; i < out * in; i++) {
        float v = rnd();
        (*store)[i] = pm_f32_to_bf16(outlier_every > 0 && i % outlier_every == 0 ? 8.0f * v : v);
    }
    pm_tensor t = {.name = "w", .dtype = PM_DT_BF16, .ndim = 2, .shape = {out, in}, .numel = (int64_t)out * in, .data = *store,
                   .nbytes = (size_t)out * in * 2};
    return t;
}

#endif
