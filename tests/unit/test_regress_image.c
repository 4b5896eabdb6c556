/* test_regress_image.c — regression inputs found by fuzz/fuzz_image.c.
 *
 * 1. A PNG whose IHDR declares 3902106676 x 2860078323 pixels (the fuzzer's 49-byte input below,
 *    after its mode byte): the size check refused it (a side over 2^28) but the error message
 *    computed w * h in int64_t, which overflows: undefined behaviour (UBSan, "signed integer
 *    overflow" in img_begin, src/vision/image_file.c). Fixed: the message prints the product as a
 *    double. Has teeth under `make test-asan`; without UBSan it checks the refusal and message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "vision/image_file.h"

static const uint8_t CRASH_PNG_HUGE_IHDR[] = {
    0xfe, 0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x3d, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0xe8, 0x95, 0x6c, 0x34, 0xaa, 0x79, 0x54, 0xf3, 0x20, 0xd6, 0x0c, 0x00, 0xc4, 0x65, 0x2b, 0x55, 0xd1,
    0x65, 0xcf, 0x8c, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};

static void test_png_huge_ihdr(void **state) {
    (void)state;
    assert_int_equal(CRASH_PNG_HUGE_IHDR[0] & 1, 0); /* the harness's image mode; the file follows */
    pm_image im;
    pm_err e = {0};
    int rc = pm_image_read_memory(&im, CRASH_PNG_HUGE_IHDR + 1, sizeof CRASH_PNG_HUGE_IHDR - 1, "huge.png", 1 << 20, &e);
    assert_int_equal(rc, PM_ELIMIT);
    assert_null(im.rgb);
    assert_non_null(strstr(e.msg, "3902106676x2860078323"));
    assert_non_null(strstr(e.msg, "over the limit of 1048576 pixels"));
    /* the largest sides a PNG can declare, with the default cap */
    uint8_t png[sizeof CRASH_PNG_HUGE_IHDR - 1];
    memcpy(png, CRASH_PNG_HUGE_IHDR + 1, sizeof png);
    memset(png + 16, 0xff, 8);
    memset(&e, 0, sizeof e);
    assert_int_equal(pm_image_read_memory(&im, png, sizeof png, "max.png", 0, &e), PM_ELIMIT);
    assert_non_null(strstr(e.msg, "4294967295x4294967295"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_huge_ihdr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
