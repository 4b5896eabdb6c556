/* test_image_hd.c — the image front-end (decode, Pillow bilinear port, dynamic HD, bicubic global
 * view) against the official outputs in $PHI4MM_FIXTURES/phi4mm-tiny/ref/image (missing = FAIL):
 * canvas byte-equal, input_image_embeds within 1e-5 (measured: bit-equal), masks exact,
 * image_sizes and num_img_tokens exact. Plus bad images as a user would hand them over
 * (truncated PNG, JPEG with a broken header, 0x0, a 20000x20000 header, a text file renamed .png,
 * the pixel cap as a parameter), small hand-checked resize/bicubic cases and the crop-grid choice
 * for extreme aspect ratios. The byte-for-byte differential tests against real Pillow/PyTorch are in
 * tests/e2e/image_diff.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/npy.h"
#include "vision/hd.h"
#include "vision/image_file.h"
#include "vision/resize.h"
#include "test_util.h"

static const char *fixdir(void) {
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/phi4mm-tiny", tu_fixtures());
    return buf;
}

static void load_ref(pm_npy *a, const char *name) {
    char p[1300];
    pm_err e = {0};
    snprintf(p, sizeof p, "%s/ref/image/%s.npy", fixdir(), name);
    int rc = pm_npy_load(a, p, &e);
    if (rc) fail_msg("fixture missing: %s (set PHI4MM_FIXTURES)", e.msg);
}

/* ------------------------------------------------------------------------------- fixture */

static void test_fixture_image(void **state) {
    (void)state;
    char path[1300];
    snprintf(path, sizeof path, "%s/inputs/image.png", fixdir());
    pm_err e = {0};
    pm_image im;
    int rc = pm_image_read_file(&im, path, 0, &e);
    if (rc) fail_msg("%s", e.msg);
    assert_int_equal(im.width, 640);
    assert_int_equal(im.height, 480);

    pm_hd_image h;
    rc = pm_hd_preprocess(&im, 36, 448, &h, &e);
    if (rc) fail_msg("%s", e.msg);

    pm_npy canvas, embeds, sizes, amask, hmask, ntok;
    load_ref(&canvas, "hd_resized_padded_u8");
    load_ref(&embeds, "input_image_embeds");
    load_ref(&sizes, "image_sizes");
    load_ref(&amask, "image_attention_mask");
    load_ref(&hmask, "hd_attention_mask");
    load_ref(&ntok, "num_img_tokens");

    /* image_sizes, token count, crop count */
    assert_int_equal(h.canvas_h, (int)pm_npy_get(&sizes, 0));
    assert_int_equal(h.canvas_w, (int)pm_npy_get(&sizes, 1));
    assert_int_equal(h.num_tokens, (int)pm_npy_get(&ntok, 0));
    assert_int_equal(h.num_tokens, 1065);
    assert_int_equal(pm_hd_num_tokens(640, 480, 36, 448), 1065);
    assert_int_equal(embeds.shape[1], h.n_crops);
    assert_int_equal(h.w_crops * h.h_crops + 1, h.n_crops);

    /* resized + padded canvas: byte-equal */
    assert_int_equal(canvas.numel, (size_t)h.canvas_h * h.canvas_w * 3);
    size_t ndiff = 0;
    for (size_t i = 0; i < canvas.numel; i++) ndiff += ((uint8_t *)canvas.data)[i] != h.canvas_u8[i];
    if (ndiff) fail_msg("hd_resized_padded_u8: %zu bytes differ", ndiff);

    /* crops: global view (bicubic) + 4 sub-crops */
    assert_int_equal(embeds.numel, (size_t)h.n_crops * 3 * 448 * 448);
    double worst = 0, worst_glob = 0;
    const float *ref = embeds.data;
    size_t per = (size_t)3 * 448 * 448;
    for (size_t i = 0; i < embeds.numel; i++) {
        double d = fabs((double)ref[i] - h.pixels[i]);
        if (d > worst) worst = d;
        if (i < per && d > worst_glob) worst_glob = d;
    }
    print_message("input_image_embeds max|d| = %.3g (global view %.3g)\n", worst, worst_glob);
    assert_true(worst <= 1e-5);

    /* masks exact */
    assert_int_equal(amask.numel, (size_t)h.n_crops * 32 * 32);
    for (size_t i = 0; i < amask.numel; i++) assert_true(pm_npy_get(&amask, i) == h.crop_mask[i]);
    assert_int_equal(hmask.numel, (size_t)(h.canvas_h / 14) * (h.canvas_w / 14));
    for (size_t i = 0; i < hmask.numel; i++) assert_true(pm_npy_get(&hmask, i) == h.canvas_mask[i]);

    pm_npy_free(&canvas);
    pm_npy_free(&embeds);
    pm_npy_free(&sizes);
    pm_npy_free(&amask);
    pm_npy_free(&hmask);
    pm_npy_free(&ntok);
    pm_hd_free(&h);
    pm_image_free(&im);
}

/* ------------------------------------------------------------------------------ bad files */

static int write_file(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(d, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

static void be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Tries a file; expects failure with `code` and a message that names the file and contains `word`. */
static void expect_reject(const char *path, int code, const char *word) {
    pm_err e = {0};
    pm_image im;
    int rc = pm_image_read_file(&im, path, 0, &e);
    print_message("  %s -> %d %s\n", strrchr(path, '/') + 1, rc, e.msg);
    assert_int_equal(rc, code);
    assert_null(im.rgb);
    assert_non_null(strstr(e.msg, strrchr(path, '/') + 1));
    assert_non_null(strstr(e.msg, word));
}

static void test_bad_images(void **state) {
    (void)state;
    char src[1300], dir[] = "/tmp/pm_test_image_XXXXXX", p[256];
    assert_non_null(mkdtemp(dir));
    snprintf(src, sizeof src, "%s/inputs/image.png", fixdir());
    size_t len = 0;
    uint8_t *png = tu_slurp(src, &len);
    if (!png) fail_msg("fixture missing: %s", src);

    /* truncated PNG (half of the file) */
    snprintf(p, sizeof p, "%s/truncated.png", dir);
    write_file(p, png, len / 2);
    expect_reject(p, PM_EFORMAT, "truncated");

    /* 0x0 and 20000x20000 headers (IHDR patched, CRC not even reached) */
    uint8_t hdr[64];
    memcpy(hdr, png, 33);
    be32(hdr + 16, 0);
    be32(hdr + 20, 0);
    snprintf(p, sizeof p, "%s/zero.png", dir);
    write_file(p, hdr, 33);
    expect_reject(p, PM_EFORMAT, "zero-size");
    be32(hdr + 16, 20000);
    be32(hdr + 20, 20000);
    snprintf(p, sizeof p, "%s/huge.png", dir);
    write_file(p, hdr, 33);
    expect_reject(p, PM_ELIMIT, "over the limit");

    /* a text file renamed .png */
    const char *txt = "name,age\nalice,31\nbob,27\n";
    snprintf(p, sizeof p, "%s/notes.png", dir);
    write_file(p, txt, strlen(txt));
    expect_reject(p, PM_EFORMAT, "not a recognised image");

    /* JPEG whose header is broken: SOI + APP0, then junk instead of markers */
    uint8_t jpg[300];
    memset(jpg, 0x41, sizeof jpg);
    memcpy(jpg, "\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00", 20);
    snprintf(p, sizeof p, "%s/broken.jpg", dir);
    write_file(p, jpg, sizeof jpg);
    expect_reject(p, PM_EFORMAT, "corrupt JPEG");

    /* empty file, a GIF without an image, missing file */
    snprintf(p, sizeof p, "%s/empty.png", dir);
    write_file(p, "", 0);
    expect_reject(p, PM_EFORMAT, "empty");
    snprintf(p, sizeof p, "%s/anim.gif", dir);
    write_file(p, "GIF89a\x01\x00\x01\x00\x00\x00\x00;", 14);
    expect_reject(p, PM_EFORMAT, "GIF without an image");
    snprintf(p, sizeof p, "%s/missing.png", dir);
    expect_reject(p, PM_EIO, "cannot open");

    /* the pixel cap is a parameter: the 640x480 fixture is over a 300,000-pixel cap */
    pm_err e = {0};
    pm_image im;
    assert_int_equal(pm_image_read_memory(&im, png, len, "capped.png", 300000, &e), PM_ELIMIT);
    assert_non_null(strstr(e.msg, "capped.png"));
    pm_err_clear(&e);
    assert_int_equal(pm_image_read_memory(&im, png, len, "fits.png", 640 * 480, &e), PM_OK);
    pm_image_free(&im);
    pm_image_free(&im); /* idempotent */

    free(png);
    const char *names[] = {"truncated.png", "zero.png", "huge.png", "notes.png", "broken.jpg", "empty.png", "anim.gif"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* ------------------------------------------------------------------- resize / bicubic / grid */

static void test_resize_small_cases(void **state) {
    (void)state;
    pm_err e = {0};
    /* 2x1 -> 1x1: both taps weigh 0.5 -> (0 + 255) / 2 rounds to 128 */
    uint8_t a[6] = {0, 0, 0, 255, 255, 255}, o[3];
    assert_int_equal(pm_resize_bilinear_u8(a, 2, 1, o, 1, 1, &e), PM_OK);
    assert_int_equal(o[0], 128);
    /* same size: a copy */
    uint8_t b[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, c[12];
    assert_int_equal(pm_resize_bilinear_u8(b, 2, 2, c, 2, 2, &e), PM_OK);
    assert_memory_equal(b, c, 12);
    /* constant images stay constant at any scale */
    uint8_t *k = malloc(7 * 5 * 3), *ko = malloc(300 * 2 * 3);
    memset(k, 77, 7 * 5 * 3);
    assert_int_equal(pm_resize_bilinear_u8(k, 7, 5, ko, 300, 2, &e), PM_OK);
    for (int i = 0; i < 300 * 2 * 3; i++) assert_int_equal(ko[i], 77);
    free(k);
    free(ko);
    assert_int_equal(pm_resize_bilinear_u8(a, 2, 1, o, 0, 1, &e), PM_EINVAL);
}

static void test_bicubic_identity_and_constant(void **state) {
    (void)state;
    pm_err e = {0};
    float x[2 * 5 * 7], y[2 * 5 * 7], z[2 * 13 * 3];
    for (int i = 0; i < 70; i++) x[i] = (float)sin(i * 0.7);
    assert_int_equal(pm_hd_bicubic_f32(x, 2, 5, 7, y, 5, 7, &e), PM_OK);
    assert_memory_equal(x, y, sizeof x);
    for (int i = 0; i < 70; i++) x[i] = 0.25f;
    assert_int_equal(pm_hd_bicubic_f32(x, 2, 5, 7, z, 13, 3, &e), PM_OK);
    for (int i = 0; i < 2 * 13 * 3; i++) assert_true(fabsf(z[i] - 0.25f) < 1e-6f);
}

static void test_crop_grid(void **state) {
    (void)state;
    pm_hd_plan p;
    pm_err e = {0};
    /* ordinary: ceil(W/448) x ceil(H/448) */
    assert_int_equal(pm_hd_plan_compute(640, 480, 36, 448, &p, &e), PM_OK);
    assert_int_equal(p.w_crops, 2);
    assert_int_equal(p.h_crops, 2);
    assert_int_equal(p.new_w, 896);
    assert_int_equal(p.new_h, 672);
    assert_int_equal(p.pad_h, 224);
    assert_int_equal(pm_hd_num_tokens(448, 448, 36, 448), 545);
    /* 3000x3000 needs 7x7 = 49 > 36 crops: closest aspect ratio 1 with the largest area rule -> 6x6 */
    assert_int_equal(pm_hd_plan_compute(3000, 3000, 36, 448, &p, &e), PM_OK);
    assert_int_equal(p.w_crops, 6);
    assert_int_equal(p.h_crops, 6);
    /* a 20000x448 panorama: 45 crops wide -> 36x1 */
    assert_int_equal(pm_hd_plan_compute(20000, 448, 36, 448, &p, &e), PM_OK);
    assert_int_equal(p.w_crops, 36);
    assert_int_equal(p.h_crops, 1);
    assert_true(p.w_crops * p.h_crops <= 36);
    /* so extreme that the official code raises: rejected, not crashed */
    pm_err_clear(&e);
    assert_int_equal(pm_hd_plan_compute(100000, 10, 36, 448, &p, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "extreme"));
    assert_true(pm_hd_num_tokens(10, 100000, 36, 448) < 0);
    assert_true(pm_hd_num_tokens(0, 10, 36, 448) < 0);
    assert_true(pm_hd_num_tokens(10, 10, 36, 100) < 0); /* crop not a multiple of 14 */
}

/* The crop grid search against the plain O(D^2) enumeration (n = 1..D, i = 1..n dividing n, the
 * first strictly better aspect difference wins, ties go to the later candidate when the image
 * area exceeds half the grid's): same grid for many sizes and crop budgets up to 4096; above 4096
 * the budget is refused. */
static void reference_grid(int w, int h, int D, int crop, int *gw, int *gh) {
    double aspect = (double)w / h, area = (double)w * h, best = INFINITY;
    *gw = *gh = 1;
    for (int n = 1; n <= D; n++)
        for (int i = 1; i <= n; i++) {
            if (n % i) continue;
            int j = n / i;
            double diff = fabs(aspect - (double)i / j);
            if (diff < best) {
                best = diff;
                *gw = i;
                *gh = j;
            } else if (diff == best && area > 0.5 * crop * crop * i * j) {
                *gw = i;
                *gh = j;
            }
        }
}

static void test_grid_search_order(void **state) {
    (void)state;
    int dyns[] = {1, 2, 3, 6, 12, 16, 36, 37, 64, 100, 360, 1000, 4096};
    uint32_t r = 99;
    int checked = 0;
    for (size_t d = 0; d < sizeof dyns / sizeof dyns[0]; d++)
        for (int k = 0; k < (dyns[d] > 1000 ? 40 : 300); k++) {
            r = r * 1664525u + 1013904223u;
            int w = 1 + (int)(r >> 8) % 20000;
            r = r * 1664525u + 1013904223u;
            int h = 1 + (int)(r >> 8) % (k % 3 ? 20000 : 300);
            int crop = k % 2 ? 448 : 28, gw, gh;
            pm_hd_plan p;
            int rc = pm_hd_plan_compute(w, h, dyns[d], crop, &p, NULL);
            int64_t wc = (w + crop - 1) / crop, hc = (h + crop - 1) / crop;
            if (wc * hc <= dyns[d]) continue; /* the grid of the image itself, no search */
            reference_grid(w, h, dyns[d], crop, &gw, &gh);
            if (rc == 0 || p.w_crops) {
                assert_int_equal(p.w_crops, gw);
                assert_int_equal(p.h_crops, gh);
                checked++;
            }
        }
    assert_true(checked > 1000);
    pm_hd_plan p;
    assert_true(pm_hd_plan_compute(100000, 10, 4097, 448, &p, NULL) < 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_image),
        cmocka_unit_test(test_bad_images),
        cmocka_unit_test(test_resize_small_cases),
        cmocka_unit_test(test_bicubic_identity_and_constant),
        cmocka_unit_test(test_crop_grid),
        cmocka_unit_test(test_grid_search_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
