/* test_regress_safetensors.c — regressions of the checkpoint loader found by the sanitizer suite
 * and fuzz/fuzz_safetensors.c.
 *
 * 1. Misaligned tensor data. safetensors does not require alignment: a header whose length is odd
 *    (tests/unit/test_siglip.c writes one; so do some third-party writers) puts every BF16 tensor
 *    at an odd address, and the kernels' uint16_t loads were undefined behaviour (UBSan under
 *    `make test-asan`: "load of misaligned address ... for type 'const uint16_t'" in
 *    pm_kern_bf16_to_f32). Fixed in pm_weights_open: such tensors get an aligned private copy.
 *    The file below is that shape: an unpadded 1-byte-odd header, a BF16 and an F32 tensor.
 * 2. fuzz/fuzz_safetensors.c (mode 2, a lone shard; its alignment property) then found an EMPTY
 *    tensor (F32 [0, 0] at data offset 18) left pointing at a misaligned address: converting it
 *    to float * is already undefined. Fixed: empty tensors point at an aligned dummy. The fuzzer's
 *    input follows as is (first byte = harness mode 2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"

/* u64 header length 0x6d (109, odd), the header, then 4 bytes of BF16 [2] and 8 bytes of F32 [2]. */
static const char HDR[] = "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                          "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
static const uint8_t DATA[12] = {0x80, 0x3f, 0x00, 0xc0, 0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0xbf}; /* 1, -2 | 3, -1 */

static const uint8_t CRASH_EMPTY_MISALIGNED[] = {
      0x02, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x61,
      0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22,
      0x46, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22,
      0x3a, 0x5b, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f,
      0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x30, 0x2c, 0x38,
      0x5d, 0x7d, 0x2c, 0x22, 0x62, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79,
      0x70, 0x65, 0x22, 0x3a, 0x22, 0x42, 0x46, 0x31, 0x36, 0x22, 0x2c, 0x22,
      0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b, 0x31, 0x2c, 0x32, 0x5d,
      0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65,
      0x74, 0x73, 0x22, 0x3a, 0x5b, 0x38, 0x2c, 0x31, 0x32, 0x5d, 0x7d, 0x2c,
      0x22, 0x3a, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22,
      0x3a, 0x22, 0x46, 0x33, 0x32, 0x22, 0x2c, 0x20, 0x22, 0x62, 0x22, 0x3a,
      0x20, 0x22, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2d, 0x30, 0x30, 0x30, 0x30,
      0x31, 0x2d, 0x6f, 0x66, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x32, 0x2e, 0x73,
      0x61, 0x66, 0x65, 0x74, 0x65, 0x6e, 0x73, 0x6f, 0x72, 0x73, 0x22, 0x2c,
      0x20, 0x22, 0x63, 0x22, 0x3a, 0x22, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2d,
      0x36, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x5b,
      0x30, 0x2c, 0x30, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f,
      0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31, 0x38, 0x2c,
      0x31, 0x38, 0x5d, 0x7d, 0x2c, 0x22, 0x5f, 0x5f, 0x6d, 0x65, 0x74, 0x61,
      0x64, 0x61, 0x74, 0x61, 0x5f, 0x5f, 0x22, 0x3a, 0x7b, 0x22, 0x66, 0x6f,
      0x72, 0x6d, 0x61, 0x74, 0x22, 0x3a, 0x22, 0x70, 0x74, 0x22, 0x7d, 0x7d,
      0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00
};

/* Writes the parts as a lone model.safetensors in a fresh directory, opens it through the mmap
 * path (pm_weights_open), removes the files again and returns the weights (fails the test on error). */
static pm_weights *open_shard(const void *const *parts, const size_t *sizes, int n_parts) {
    char dir[] = "/tmp/pm-regress-st-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < n_parts; i++) fwrite(parts[i], 1, sizes[i], f);
    fclose(f);
    pm_weights *w = NULL;
    pm_err e = {0};
    int rc = pm_weights_open(&w, dir, &e);
    unlink(path);
    rmdir(dir);
    if (rc) fail_msg("%s", e.msg);
    return w;
}

static void test_misaligned_tensors_copied(void **state) {
    (void)state;
    uint64_t hl = sizeof HDR - 1;
    assert_int_equal(hl % 2, 1);
    pm_weights *w = open_shard((const void *[]){&hl, HDR, DATA}, (size_t[]){8, hl, sizeof DATA}, 3);
    pm_err e = {0};
    const pm_tensor *b = pm_wget(w, &e, 1, (int64_t[]){2}, "b"), *fl = pm_wget(w, &e, 1, (int64_t[]){2}, "f");
    assert_non_null(b);
    assert_non_null(fl);
    assert_int_equal((uintptr_t)b->data % 2, 0);
    assert_int_equal((uintptr_t)fl->data % 4, 0);
    uint16_t bv[2];
    float fv[2];
    memcpy(bv, b->data, 4);
    memcpy(fv, fl->data, 8);
    assert_int_equal(bv[0], 0x3f80);
    assert_int_equal(bv[1], 0xc000);
    assert_true(fv[0] == 3.0f && fv[1] == -1.0f);
    const uint16_t *direct = b->data; /* the element load the kernels do */
    assert_int_equal(direct[1], 0xc000);
    assert_int_equal(pm_weights_check_consumed(w, &e), PM_OK);
    pm_weights_close(w);
}

static void test_empty_tensor_misaligned(void **state) {
    (void)state;
    assert_int_equal(CRASH_EMPTY_MISALIGNED[0] % 3, 2); /* the harness's lone-shard mode */
    pm_weights *w = open_shard((const void *[]){CRASH_EMPTY_MISALIGNED + 1}, (size_t[]){sizeof CRASH_EMPTY_MISALIGNED - 1}, 1);
    assert_int_equal(pm_weights_count(w), 3);
    for (int i = 0; i < pm_weights_count(w); i++) {
        const pm_tensor *t = pm_weights_at(w, i);
        assert_int_equal((uintptr_t)t->data % pm_dtype_size(t->dtype), 0);
    }
    const pm_tensor *empty = pm_weights_find(w, ":");
    assert_non_null(empty);
    assert_int_equal(empty->numel, 0);
    assert_int_equal(empty->nbytes, 0);
    pm_weights_close(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_misaligned_tensors_copied),
        cmocka_unit_test(test_empty_tensor_misaligned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
