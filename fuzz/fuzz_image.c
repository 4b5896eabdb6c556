/* fuzz_image.c — libFuzzer harness for image payloads: pm_image_read_memory (PNG, JPEG, WebP,
 * GIF, BMP, and the refusals of TIFF/animated WebP) with a small pixel cap, then the official
 * dynamic-HD preprocessing pm_hd_preprocess for small images, and the geometry alone
 * (pm_hd_plan_compute / pm_hd_num_tokens) for arbitrary sizes.
 *
 * First input byte: bit 0 = mode, bits 1.. = options.
 *   mode 0  the rest is an image file (the corpus script prepends 0x00 to the fixture image and to
 *           generated PNG/JPEG/WebP/GIF/BMP seeds). Decoded with a cap of 1 Mpixel; images of at most
 *           256x256 pixels are preprocessed with crop 14..56 and 1..36 crops (from the options).
 *           The real setting (crop 448) runs the same code on 448x448 crops at ~0.5 s per input
 *           under ASan, so it is left to the unit and parity tests;
 *   mode 1  the rest is three little-endian int32: width, height, dynamic_hd (crop from options):
 *           plan and token count for any size, including negative and huge ones.
 * Decoding goes through a memory gate (option bit 5: a small budget; bit 6: refusals say "never").
 * Properties: a refused image gives back every byte the gate granted, an accepted one holds
 * exactly its pixels' bytes and has width, height >= 1 and w*h <= the cap; the preprocessor's
 * token count equals pm_hd_num_tokens; crop pixels lie in [-1, 1] and the bicubic global view within
 * its overshoot bound; masks are 0/1. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "vision/hd.h"
#include "vision/image_file.h"

#define CAP_PIXELS ((int64_t)1 << 20)

static void check_hd(const pm_image *im, int dyn, int crop) {
    pm_hd_image h;
    pm_err e = {0};
    int want = pm_hd_num_tokens(im->width, im->height, dyn, crop);
    if (pm_hd_preprocess(im, dyn, crop, &h, &e) != PM_OK) {
        FUZZ_CHECK(want < 0 && e.code == want);
        return;
    }
    FUZZ_CHECK(h.num_tokens == want && want > 0);
    FUZZ_CHECK(h.n_crops == 1 + h.w_crops * h.h_crops && h.w_crops >= 1 && h.h_crops >= 1);
    FUZZ_CHECK(h.w_crops * h.h_crops <= dyn || (h.w_crops == (im->width + crop - 1) / crop && h.h_crops == (im->height + crop - 1) / crop));
    FUZZ_CHECK(h.canvas_w == crop * h.w_crops && h.canvas_h == crop * h.h_crops);
    /* Crops are normalised canvas pixels: [-1, 1]. The global view is PyTorch's bicubic (A = -0.75,
     * unclamped, as the official code) of them, which overshoots: at most (sum |w|)^2 = 1.375^2. */
    size_t per = (size_t)3 * crop * crop, np = (size_t)h.n_crops * per;
    for (size_t i = 0; i < np; i++) {
        float lim = i < per ? 1.8907f : 1.0001f;
        FUZZ_CHECK(isfinite(h.pixels[i]) && h.pixels[i] >= -lim && h.pixels[i] <= lim);
    }
    int m = crop / 14;
    for (size_t i = 0; i < (size_t)h.n_crops * m * m; i++) FUZZ_CHECK(h.crop_mask[i] == 0.0f || h.crop_mask[i] == 1.0f);
    for (size_t i = 0; i < (size_t)(h.canvas_w / 14) * (h.canvas_h / 14); i++)
        FUZZ_CHECK(h.canvas_mask[i] == 0.0f || h.canvas_mask[i] == 1.0f);
    volatile uint8_t sink = h.canvas_u8[(size_t)h.canvas_w * h.canvas_h * 3 - 1];
    (void)sink;
    pm_hd_free(&h);
}

static void mode_image(const uint8_t *p, size_t n, int opt) {
    pm_image im;
    pm_err e = {0};
    /* a memory gate as the server's: with option bit 5 a budget of a few KB to a few MB */
    fuzz_gate g = {0, opt & 32 ? (int64_t)(n % 9 + 1) << (10 + (opt & 7)) : INT64_MAX, opt & 64 ? 2 : 1};
    pm_media_gate gate = {fuzz_gate_adjust, &g};
    if (pm_image_read_memory_gated(&im, p, n, "fuzz.img", CAP_PIXELS, &gate, &e) != PM_OK) {
        FUZZ_CHECK(im.rgb == NULL && e.code < 0 && e.msg[0]);
        FUZZ_CHECK(g.taken == 0);
        return;
    }
    FUZZ_CHECK(g.taken == (int64_t)im.width * im.height * 3);
    FUZZ_CHECK(im.rgb != NULL && im.width >= 1 && im.height >= 1 && (int64_t)im.width * im.height <= CAP_PIXELS);
    volatile uint8_t sink = im.rgb[(size_t)im.width * im.height * 3 - 1];
    (void)sink;
    if (im.width <= 256 && im.height <= 256) check_hd(&im, 1 + (opt >> 2) % 36, 14 * (1 + (opt & 3)));
    pm_image_free(&im);
}

static void mode_plan(const uint8_t *p, size_t n, int opt) {
    int32_t v[3] = {0, 0, 0};
    memcpy(v, p, n < sizeof v ? n : sizeof v);
    int crop = 14 * (1 + (opt & 31)), dyn = v[2] % 4097;
    pm_hd_plan pl;
    pm_err e = {0};
    int rc = pm_hd_plan_compute(v[0], v[1], dyn, crop, &pl, &e);
    int nt = pm_hd_num_tokens(v[0], v[1], dyn, crop);
    if (rc == PM_OK) {
        FUZZ_CHECK(nt == pl.num_tokens && nt > 0);
        FUZZ_CHECK(pl.w_crops >= 1 && pl.h_crops >= 1 && pl.canvas_w == crop * pl.w_crops && pl.canvas_h == crop * pl.h_crops);
        FUZZ_CHECK(pl.new_w >= 10 && pl.new_h >= 10 && pl.new_w <= pl.canvas_w && pl.new_h <= pl.canvas_h);
        FUZZ_CHECK(pl.pad_w == pl.canvas_w - pl.new_w || pl.pad_h == pl.canvas_h - pl.new_h);
    } else {
        FUZZ_CHECK(nt == rc && e.msg[0]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 1) mode_plan(data + 1, size - 1, data[0] >> 1);
    else mode_image(data + 1, size - 1, data[0] >> 1);
    return 0;
}
