/* fuzz_safetensors.c — libFuzzer harness for the checkpoint loader (src/io/safetensors.c).
 *
 * The first input byte picks the mode (byte % 3), the rest is the payload:
 *   0  pm_safetensors_parse on the payload in memory; on success every tensor's data range must lie
 *      inside the payload (first and last byte are read, so ASan sees an escape), names must be
 *      unique and ranges must not overlap;
 *   1  the payload is model.safetensors.index.json in a scratch checkpoint directory that also holds
 *      two small valid shards (model-00001-of-00002.safetensors: a, b; ...00002...: c); then
 *      pm_weights_open, lookups, the consumption check and close;
 *   2  the payload is a lone model.safetensors (no index): the mmap path of pm_weights_open.
 * Modes 1 and 2 also check that every tensor pm_weights hands out is aligned to its element size
 * (a file may store it misaligned; the loader then gives an aligned copy).
 * Seeds (fuzz/make_corpus.sh): the fixture's index, the first bytes of its shard, hand-made shards. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_util.h"
#include "io/safetensors.h"

static char idx_dir[512], one_dir[512];

/* Writes a shard whose header is `json` followed by `data_len` zero bytes. */
static void write_shard(const char *dir, const char *name, const char *json, size_t data_len) {
    size_t hl = strlen(json), n = 8 + hl + data_len;
    uint8_t *b = calloc(1, n);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, json, hl);
    fuzz_write_file(dir, name, b, n);
    free(b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *s = fuzz_scratch();
    snprintf(idx_dir, sizeof idx_dir, "%s/idx", s);
    snprintf(one_dir, sizeof one_dir, "%s/one", s);
    fuzz_mkdir(idx_dir);
    fuzz_mkdir(one_dir);
    write_shard(idx_dir, "model-00001-of-00002.safetensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[8,12]},"
                "\"__metadata__\":{\"format\":\"pt\"}}",
                12);
    write_shard(idx_dir, "model-00002-of-00002.safetensors", "{\"c\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}", 6);
    return 0;
}

static void check_tensors(const uint8_t *buf, size_t len, const pm_tensor *t, int n) {
    volatile uint8_t sink = 0;
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(t[i].name != NULL);
        FUZZ_CHECK(t[i].ndim >= 0 && t[i].ndim <= PM_MAX_DIMS);
        FUZZ_CHECK(t[i].nbytes == (size_t)t[i].numel * pm_dtype_size(t[i].dtype));
        const uint8_t *d = t[i].data;
        if (buf) FUZZ_CHECK(d >= buf && d + t[i].nbytes <= buf + len);
        if (t[i].nbytes) sink ^= d[0] ^ d[t[i].nbytes - 1];
        for (int j = 0; j < i; j++) FUZZ_CHECK(strcmp(t[i].name, t[j].name) != 0);
    }
    (void)sink;
}

static void open_dir(const char *dir) {
    pm_err e = {0};
    pm_weights *w = NULL;
    if (pm_weights_open(&w, dir, &e) == PM_OK) {
        FUZZ_CHECK(w != NULL);
        int n = pm_weights_count(w);
        for (int i = 0; i < n; i++) {
            const pm_tensor *t = pm_weights_at(w, i);
            check_tensors(NULL, 0, t, 1);
            FUZZ_CHECK((uintptr_t)t->data % pm_dtype_size(t->dtype) == 0); /* the kernels' element loads */
            FUZZ_CHECK(pm_weights_find(w, t->name) == t);
            FUZZ_CHECK(t->shard >= 0 && t->shard < pm_weights_num_shards(w));
            FUZZ_CHECK(pm_weights_shard_path(w, t->shard) != NULL);
        }
        FUZZ_CHECK(pm_weights_find(w, "no-such-tensor") == NULL);
        /* Fetch one tensor with its own shape (marks it consumed), then the consumption check. */
        if (n > 0) {
            const pm_tensor *t0 = pm_weights_at(w, 0);
            FUZZ_CHECK(pm_wget(w, &e, t0->ndim, t0->shape, "%s", t0->name) == t0);
        }
        pm_err e2 = {0};
        int rc = pm_weights_check_consumed(w, &e2);
        FUZZ_CHECK((rc == PM_OK) == (n <= 1));
        pm_weights_close(w);
    } else {
        FUZZ_CHECK(w == NULL && e.code != PM_OK && e.msg[0]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0: {
        /* A private copy of exactly n bytes, so an out-of-range pointer is an ASan report. */
        uint8_t *buf = malloc(n ? n : 1);
        memcpy(buf, p, n);
        pm_err e = {0};
        pm_tensor *t = NULL;
        int nt = -1;
        if (pm_safetensors_parse(buf, n, "fuzz.safetensors", &t, &nt, &e) == PM_OK) {
            FUZZ_CHECK(nt >= 0 && (t != NULL));
            check_tensors(buf, n, t, nt);
            pm_safetensors_free_tensors(t, nt);
        } else {
            FUZZ_CHECK(t == NULL && nt == 0 && e.code != PM_OK && e.msg[0]);
        }
        free(buf);
        break;
    }
    case 1:
        fuzz_write_file(idx_dir, "model.safetensors.index.json", p, n);
        open_dir(idx_dir);
        break;
    default:
        fuzz_write_file(one_dir, "model.safetensors", p, n);
        open_dir(one_dir);
        break;
    }
    return 0;
}
