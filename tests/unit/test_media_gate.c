/* test_media_gate.c — the memory gate of the media decoders (phi4mm.h: pm_media_gate), which the
 * server charges every decoded sample and pixel to before it is allocated:
 *  - audio: a success leaves exactly the samples' bytes taken (the growth slack is given back), a
 *    refusal ("not now" -> PM_EBUSY, "never" -> PM_ELIMIT) stops decoding at the first buffer
 *    growth it refuses and gives everything back; the seconds limit caps the buffer's growth;
 *  - images: the pixels' bytes are asked for before they are allocated (a refusal is returned
 *    before any pixel is decoded), an interlaced PNG's whole-image scratch is asked for and given
 *    back, as are a progressive JPEG's whole-image coefficients, and nothing stays taken after a
 *    failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <png.h>
#include <sndfile.h>
#include <stdio.h>
#include <jpeglib.h> /* after stdio.h: it uses FILE */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phi4mm.h"
#include "flac_silence.h"

typedef struct counter {
    int64_t taken, peak, budget; /* budget < 0: refuse as "never" once over |budget| */
    int asks, refusals;
} counter;

static int count_adjust(void *user, int64_t delta) {
    counter *c = user;
    if (delta > 0) {
        c->asks++;
        int64_t lim = c->budget < 0 ? -c->budget : c->budget;
        if (c->taken + delta > lim) {
            c->refusals++;
            return c->budget < 0 ? 2 : 1;
        }
    }
    c->taken += delta;
    if (c->taken > c->peak) c->peak = c->taken;
    return 0;
}

static void test_audio_gate(void **state) {
    (void)state;
    size_t len;
    uint8_t *flac = flac_silence(100, &len); /* 1.6 M samples = 12.8 MB decoded from a few KB */
    char err[512];
    pm_audio_in a;
    counter c = {.budget = 64 << 20};
    pm_media_gate g = {count_adjust, &c};
    assert_int_equal(pm_audio_decode_gated(flac, len, "s.flac", 0, &g, &a, err, sizeof err), PM_OK);
    assert_int_equal(a.n_samples, 1600000);
    assert_int_equal(c.taken, (int64_t)a.n_samples * 8); /* trimmed to the samples */
    assert_true(c.peak >= c.taken && c.peak <= 2 * c.taken); /* the doubling buffer, never more */
    pm_audio_in_free(&a);

    /* the seconds limit caps the buffer: a 100 s clip under a 100 s limit takes at most 100 s */
    c = (counter){.budget = 64 << 20};
    assert_int_equal(pm_audio_decode_gated(flac, len, "s.flac", 100.0, &g, &a, err, sizeof err), PM_OK);
    assert_true(c.peak <= (int64_t)(100 * 16000 + 1) * 8);
    pm_audio_in_free(&a);

    /* not now: PM_EBUSY at the first refused growth, everything given back */
    c = (counter){.budget = 4 << 20};
    assert_int_equal(pm_audio_decode_gated(flac, len, "s.flac", 0, &g, &a, err, sizeof err), PM_EBUSY);
    assert_null(a.samples);
    assert_int_equal(c.taken, 0);
    assert_int_equal(c.refusals, 1);
    assert_true(c.peak <= 4 << 20);
    assert_non_null(strstr(err, "s.flac"));
    /* never: PM_ELIMIT */
    c = (counter){.budget = -(4 << 20)};
    assert_int_equal(pm_audio_decode_gated(flac, len, "s.flac", 0, &g, &a, err, sizeof err), PM_ELIMIT);
    assert_int_equal(c.taken, 0);
    /* no gate: as pm_audio_decode_max */
    assert_int_equal(pm_audio_decode_gated(flac, len, "s.flac", 0, NULL, &a, err, sizeof err), PM_OK);
    assert_int_equal(a.n_samples, 1600000);
    pm_audio_in_free(&a);
    free(flac);
}

typedef struct membuf {
    uint8_t *p;
    size_t len, cap;
} membuf;

static void mem_write(png_structp png, png_bytep data, png_size_t n) {
    membuf *m = png_get_io_ptr(png);
    if (m->len + n > m->cap) {
        m->cap = (m->len + n) * 2;
        m->p = realloc(m->p, m->cap);
    }
    memcpy(m->p + m->len, data, n);
    m->len += n;
}

static void mem_flush(png_structp png) { (void)png; }

/* A w x h RGB PNG (interlaced or not), in memory. */
static membuf make_png(int w, int h, int interlace) {
    membuf m = {0};
    png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(p);
    uint8_t *row = malloc((size_t)w * 3);
    if (setjmp(png_jmpbuf(p))) fail_msg("libpng could not write the test image");
    png_set_write_fn(p, &m, mem_write, mem_flush);
    png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(p, info);
    int passes = png_set_interlace_handling(p);
    for (int pass = 0; pass < passes; pass++)
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w * 3; x++) row[x] = (uint8_t)(x * 7 + y * 3);
            png_write_row(p, row);
        }
    png_write_end(p, info);
    png_destroy_write_struct(&p, &info);
    free(row);
    return m;
}

static void test_image_gate(void **state) {
    (void)state;
    char err[512];
    pm_image_in im;
    for (int interlace = 0; interlace < 2; interlace++) {
        membuf png = make_png(300, 200, interlace);
        int64_t pixels = 300 * 200 * 3;
        counter c = {.budget = 64 << 20};
        pm_media_gate g = {count_adjust, &c};
        assert_int_equal(pm_image_decode_gated(png.p, png.len, "i.png", 0, &g, &im, err, sizeof err), PM_OK);
        assert_int_equal(c.taken, pixels); /* the pixels stay taken, an interlaced image's scratch came back */
        assert_int_equal(c.asks, interlace ? 2 : 1);
        if (interlace) assert_true(c.peak >= 2 * pixels);
        assert_int_equal(im.width, 300);
        pm_image_in_free(&im);
        /* not now, before any pixel is decoded; never */
        c = (counter){.budget = pixels - 1};
        assert_int_equal(pm_image_decode_gated(png.p, png.len, "i.png", 0, &g, &im, err, sizeof err), PM_EBUSY);
        assert_null(im.rgb);
        assert_int_equal(c.taken, 0);
        c = (counter){.budget = -(pixels - 1)};
        assert_int_equal(pm_image_decode_gated(png.p, png.len, "i.png", 0, &g, &im, err, sizeof err), PM_ELIMIT);
        assert_int_equal(c.taken, 0);
        /* room for the pixels but not for an interlaced image's scratch: refused, all given back */
        c = (counter){.budget = pixels + 1};
        assert_int_equal(pm_image_decode_gated(png.p, png.len, "i.png", 0, &g, &im, err, sizeof err), interlace ? PM_EBUSY : PM_OK);
        assert_int_equal(c.taken, interlace ? 0 : pixels);
        pm_image_in_free(&im);
        /* a corrupt image after the pixels were granted: given back */
        c = (counter){.budget = 64 << 20};
        assert_true(pm_image_decode_gated(png.p, png.len / 2, "half.png", 0, &g, &im, err, sizeof err) != PM_OK);
        assert_int_equal(c.taken, 0);
        free(png.p);
    }
}

/* A w x h RGB JPEG in memory, progressive or baseline (libjpeg's own writer). */
static membuf make_jpeg(int w, int h, int progressive) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr em;
    ci.err = jpeg_std_error(&em);
    jpeg_create_compress(&ci);
    unsigned char *buf = NULL;
    unsigned long len = 0;
    jpeg_mem_dest(&ci, &buf, &len);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    if (progressive) jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    uint8_t *row = malloc((size_t)w * 3);
    while (ci.next_scanline < ci.image_height) {
        for (int x = 0; x < w * 3; x++) row[x] = (uint8_t)(x + ci.next_scanline);
        JSAMPROW rp = row;
        jpeg_write_scanlines(&ci, &rp, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(row);
    membuf m = {buf, len, len};
    return m;
}

/* A progressive JPEG's whole-image coefficients (libjpeg holds them until the last scan) are asked
 * of the gate beside the pixels and given back; a baseline JPEG asks for its pixels only. */
static void test_jpeg_gate(void **state) {
    (void)state;
    char err[512];
    pm_image_in im;
    int64_t pixels = 320 * 240 * 3;
    for (int progressive = 0; progressive < 2; progressive++) {
        membuf jpg = make_jpeg(320, 240, progressive);
        counter c = {.budget = 64 << 20};
        pm_media_gate g = {count_adjust, &c};
        assert_int_equal(pm_image_decode_gated(jpg.p, jpg.len, "i.jpg", 0, &g, &im, err, sizeof err), PM_OK);
        assert_int_equal(c.taken, pixels);
        assert_int_equal(c.asks, progressive ? 2 : 1);
        if (progressive) assert_true(c.peak >= pixels + 320 * 240 * 2); /* at least the luma coefficients */
        pm_image_in_free(&im);
        c = (counter){.budget = pixels + 1};
        assert_int_equal(pm_image_decode_gated(jpg.p, jpg.len, "i.jpg", 0, &g, &im, err, sizeof err), progressive ? PM_EBUSY : PM_OK);
        assert_int_equal(c.taken, progressive ? 0 : pixels);
        pm_image_in_free(&im);
        free(jpg.p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_audio_gate),
        cmocka_unit_test(test_image_gate),
        cmocka_unit_test(test_jpeg_gate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
