/* image_file.c — PNG (libpng), JPEG (libjpeg-turbo), WebP (libwebp), GIF (giflib: image_gif.c) and BMP (here) decoding
 * into RGB8 with the pixel values PIL's Image.open(...).convert('RGB') produces (Pillow 9.x).
 *
 * Design. The format is sniffed from the magic bytes. Each decoder reads the header first and
 * calls img_begin(), which rejects zero sizes and sizes over the pixel cap before any pixel
 * buffer is allocated. Decoders convert row by row into the RGB output:
 *   PNG   no libpng colour transforms except unpacking of sub-byte samples (grey 1/2/4-bit is
 *         scaled to 0..255 like PIL's "1"/"L;2"/"L;4" unpackers); tRNS, gAMA, iCCP ignored;
 *         16-bit RGB/RGBA/GA keep the high byte; 16-bit grey is PIL mode I -> clip to 255;
 *         palette indices look up a 256-entry table that starts as PIL's grey ramp.
 *         Truncated image data is an error (PIL raises "image file is truncated"); missing
 *         chunks after the image data are tolerated, as PIL does.
 *   JPEG  libjpeg's default decoding (islow IDCT, fancy upsampling), the same library PIL uses;
 *         1 component -> grey, 3 -> RGB, 4 -> CMYK read inverted (PIL's "CMYK;I") then PIL's
 *         cmyk2rgb. A file that ends before the last scanline is an error; warnings about
 *         corrupt segments are ignored (PIL ignores them too).
 *   WebP  still images only, decoded straight to RGB (PIL's first-frame RGBA minus alpha).
 *   GIF   the first frame, as PIL's first frame (image_gif.c).
 *   BMP   uncompressed 1/4/8-bit palette, 24-bit and 32-bit (BGRX) only.
 * libpng and libjpeg report errors by longjmp: all state they touch lives in heap or caller
 * structs, never in locals modified after setjmp. */
#include "image_file.h"
#include "image_internal.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>
#include <jpeglib.h>
#include <jerror.h>
#include <webp/decode.h>

/* Asks the gate for bytes more (bytes < 0: gives back); PM_EBUSY / PM_ELIMIT with e set when it
 * refuses. */
int img_take(img_ctx *c, int64_t bytes) {
    if (!c->gate || !bytes) return PM_OK;
    int r = c->gate->adjust(c->gate->user, bytes);
    if (bytes < 0 || r == 0) {
        c->taken += bytes;
        return PM_OK;
    }
    if (r == 1) return pm_errf(c->e, PM_EBUSY, "%s: no memory is free for decoded media right now", c->what);
    return pm_errf(c->e, PM_ELIMIT, "%s: the decoded image (%.1f MB) would take more than the memory allowed for decoded media", c->what,
                   (double)bytes / 1e6);
}

/* Validates the header size and allocates the output. */
int img_begin(img_ctx *c, const char *fmt, int64_t w, int64_t h) {
    if (w <= 0 || h <= 0)
        return pm_errf(c->e, PM_EFORMAT, "%s: zero-size %s image (%lldx%lld)", c->what, fmt, (long long)w,
                       (long long)h);
    if (w > (1 << 28) || h > (1 << 28) || w * h > c->max_pixels)
        return pm_errf(c->e, PM_ELIMIT, "%s: %s image is %lldx%lld = %.0f pixels, over the limit of %lld pixels",
                       c->what, fmt, (long long)w, (long long)h, (double)w * (double)h, (long long)c->max_pixels);
    int rc = img_take(c, w * h * 3);
    if (rc) return rc;
    c->out->rgb = pm_malloc((size_t)w * (size_t)h * 3, c->e);
    if (!c->out->rgb) return PM_ENOMEM;
    c->out->width = (int)w;
    c->out->height = (int)h;
    return PM_OK;
}

static uint32_t rd_be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint32_t rd_le32(const uint8_t *p) { return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0]; }
static uint16_t rd_le16(const uint8_t *p) { return (uint16_t)(p[1] << 8 | p[0]); }

/* PIL's palette before the file's entries are applied: the grey ramp. */
void img_grey_ramp(uint8_t pal[256 * 3]) {
    for (int i = 0; i < 256; i++) pal[3 * i] = pal[3 * i + 1] = pal[3 * i + 2] = (uint8_t)i;
}

/* ------------------------------------------------------------------------------------ PNG */

static void png_err_cb(png_structp png, png_const_charp msg) {
    img_ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_warn_cb(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void png_read_cb(png_structp png, png_bytep out, size_t n) {
    img_ctx *c = png_get_io_ptr(png);
    if (n > c->len - c->pos) png_error(png, "the file ends early (truncated)");
    memcpy(out, c->data + c->pos, n);
    c->pos += n;
}

/* One decoded PNG row (after unpacking to >= 8 bits) -> RGB8. */
static void png_row_rgb(const uint8_t *in, uint8_t *out, int w, int ctype, int depth, const uint8_t *pal) {
    for (int x = 0; x < w; x++, out += 3) {
        switch (ctype) {
        case PNG_COLOR_TYPE_GRAY:
            if (depth == 16) {
                unsigned v = (unsigned)in[2 * x] << 8 | in[2 * x + 1];
                out[0] = out[1] = out[2] = (uint8_t)(v > 255 ? 255 : v);
            } else {
                out[0] = out[1] = out[2] = in[x];
            }
            break;
        case PNG_COLOR_TYPE_GRAY_ALPHA:
            out[0] = out[1] = out[2] = in[(depth == 16 ? 4 : 2) * x];
            break;
        case PNG_COLOR_TYPE_RGB:
        case PNG_COLOR_TYPE_RGB_ALPHA: {
            int bpp = (ctype == PNG_COLOR_TYPE_RGB ? 3 : 4) * (depth == 16 ? 2 : 1), step = depth == 16 ? 2 : 1;
            const uint8_t *p = in + (size_t)x * bpp;
            out[0] = p[0];
            out[1] = p[step];
            out[2] = p[2 * step];
            break;
        }
        default: /* palette */
            memcpy(out, pal + 3 * in[x], 3);
            break;
        }
    }
}

static int png_decode_rows(img_ctx *c) {
    uint8_t pal[256 * 3];
    img_grey_ramp(pal);
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, c, png_err_cb, png_warn_cb);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        return pm_errf(c->e, PM_ENOMEM, "%s: out of memory starting the PNG decoder", c->what);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        return c->gate_rc ? c->gate_rc : pm_errf(c->e, PM_EFORMAT, "%s: corrupt PNG: %s", c->what, c->msg);
    }
    png_set_read_fn(png, c, png_read_cb);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff); /* the pixel cap was checked from IHDR */
    png_set_benign_errors(png, 1);
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, ctype, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    if ((int64_t)w != c->out->width || (int64_t)h != c->out->height) png_error(png, "inconsistent IHDR");
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        png_colorp plte;
        int n = 0;
        if (png_get_PLTE(png, info, &plte, &n) & PNG_INFO_PLTE)
            for (int i = 0; i < n && i < 256; i++) {
                pal[3 * i] = plte[i].red;
                pal[3 * i + 1] = plte[i].green;
                pal[3 * i + 2] = plte[i].blue;
            }
    }
    if (depth < 8) {
        if (ctype == PNG_COLOR_TYPE_GRAY) png_set_expand_gray_1_2_4_to_8(png);
        else png_set_packing(png);
    }
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int d = png_get_bit_depth(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if (passes > 1) { /* the whole decoded image first: up to 8 bytes per pixel more, asked of the gate too */
        if ((c->gate_rc = img_take(c, (int64_t)rowbytes * h))) png_error(png, "no memory for decoded media");
        c->scratch_taken = c->gate ? (int64_t)rowbytes * h : 0;
        c->all = malloc(rowbytes * h);
        c->rows = malloc(sizeof(png_bytep) * h);
        if (!c->all || !c->rows) png_error(png, "out of memory for an interlaced image");
        for (png_uint_32 y = 0; y < h; y++) c->rows[y] = c->all + rowbytes * y;
        png_read_image(png, c->rows);
        for (png_uint_32 y = 0; y < h; y++)
            png_row_rgb(c->rows[y], c->out->rgb + (size_t)y * w * 3, (int)w, ctype, d, pal);
    } else {
        c->row = malloc(rowbytes);
        if (!c->row) png_error(png, "out of memory for a row");
        for (png_uint_32 y = 0; y < h; y++) {
            png_read_row(png, c->row, NULL);
            png_row_rgb(c->row, c->out->rgb + (size_t)y * w * 3, (int)w, ctype, d, pal);
        }
    }
    png_destroy_read_struct(&png, &info, NULL);
    return PM_OK;
}

static int decode_png(img_ctx *c) {
    /* signature(8) + IHDR length(4) + "IHDR"(4) + width(4) + height(4) */
    if (c->len < 24 || memcmp(c->data + 12, "IHDR", 4))
        return pm_errf(c->e, PM_EFORMAT, "%s: corrupt PNG: missing or truncated IHDR header", c->what);
    int rc = img_begin(c, "PNG", rd_be32(c->data + 16), rd_be32(c->data + 20));
    if (rc) return rc;
    return png_decode_rows(c);
}

/* ----------------------------------------------------------------------------------- JPEG */

typedef struct jpg_state {
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr em;
    jmp_buf jb;
    int eof_hit;   /* the source ran out of data and libjpeg inserted a fake EOI */
    img_ctx *c;
} jpg_state;

static void jpg_error_exit(j_common_ptr ci) {
    jpg_state *s = (jpg_state *)ci->client_data;
    ci->err->format_message(ci, s->c->msg);
    longjmp(s->jb, 1);
}

static void jpg_emit(j_common_ptr ci, int level) {
    jpg_state *s = (jpg_state *)ci->client_data;
    if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF) s->eof_hit = 1;
}

static void jpg_output(j_common_ptr ci) { (void)ci; }

/* PIL's cmyk2rgb on an inverted (Adobe) CMYK sample. */
static inline uint8_t cmyk_chan(int v, int nk) {
    int t = v * nk + 128;
    int r = nk - (((t >> 8) + t) >> 8);
    return (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
}

static int jpg_decode(img_ctx *c, jpg_state *s) {
    if (setjmp(s->jb)) {
        jpeg_destroy_decompress(&s->ci);
        return pm_errf(c->e, PM_EFORMAT, "%s: corrupt JPEG: %s", c->what, c->msg);
    }
    jpeg_create_decompress(&s->ci);
    jpeg_mem_src(&s->ci, c->data, (unsigned long)c->len);
    jpeg_read_header(&s->ci, TRUE);
    if (s->eof_hit) {
        jpeg_destroy_decompress(&s->ci);
        return pm_errf(c->e, PM_EFORMAT, "%s: corrupt JPEG: the file ends inside the header (truncated)", c->what);
    }
    int nc = s->ci.num_components;
    if (nc == 1) s->ci.out_color_space = JCS_GRAYSCALE;
    else if (nc == 3) s->ci.out_color_space = JCS_RGB;
    else if (nc == 4) s->ci.out_color_space = JCS_CMYK;
    else {
        jpeg_destroy_decompress(&s->ci);
        return pm_errf(c->e, PM_EUNSUPPORTED, "%s: JPEG with %d colour components is not supported", c->what, nc);
    }
    int rc = img_begin(c, "JPEG", s->ci.image_width, s->ci.image_height);
    if (!rc && c->gate && s->ci.progressive_mode) {
        /* libjpeg holds a progressive image's DCT coefficients whole (2 bytes each: 113 MB beside the
         * 113 MB of pixels for a flat 40 MP image of 233 KB), so they are asked of the gate too */
        int64_t coef = 0;
        for (int i = 0; i < nc; i++)
            coef += (int64_t)s->ci.comp_info[i].width_in_blocks * s->ci.comp_info[i].height_in_blocks * DCTSIZE2 * (int64_t)sizeof(JCOEF);
        if (!coef) coef = (int64_t)nc * ((s->ci.image_width + 7) / 8) * ((s->ci.image_height + 7) / 8) * DCTSIZE2 * (int64_t)sizeof(JCOEF);
        if (!(rc = img_take(c, coef))) c->scratch_taken = coef;
    }
    if (rc) {
        jpeg_destroy_decompress(&s->ci);
        return rc;
    }
    jpeg_start_decompress(&s->ci);
    int w = (int)s->ci.output_width, oc = s->ci.output_components;
    if (w != c->out->width || (int)s->ci.output_height != c->out->height || oc != nc) {
        jpeg_destroy_decompress(&s->ci);
        return pm_errf(c->e, PM_EFORMAT, "%s: corrupt JPEG: inconsistent output geometry", c->what);
    }
    c->row = pm_malloc((size_t)w * oc, c->e);
    if (!c->row) {
        jpeg_destroy_decompress(&s->ci);
        return PM_ENOMEM;
    }
    while (s->ci.output_scanline < s->ci.output_height) {
        uint8_t *out = c->out->rgb + (size_t)s->ci.output_scanline * w * 3;
        JSAMPROW rp = c->row;
        jpeg_read_scanlines(&s->ci, &rp, 1);
        for (int x = 0; x < w; x++) {
            const uint8_t *p = c->row + (size_t)x * oc;
            if (oc == 1) {
                out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = p[0];
            } else if (oc == 3) {
                memcpy(out + 3 * x, p, 3);
            } else {
                int nk = p[3]; /* 255 - inverted K */
                for (int k = 0; k < 3; k++) out[3 * x + k] = cmyk_chan(255 - p[k], nk);
            }
        }
    }
    if (s->eof_hit) {
        jpeg_destroy_decompress(&s->ci);
        return pm_errf(c->e, PM_EFORMAT, "%s: corrupt JPEG: the file ends before the last scanline (truncated)",
                       c->what);
    }
    /* A missing EOI after complete image data is tolerated, as PIL does. */
    jpeg_destroy_decompress(&s->ci);
    return PM_OK;
}

static int decode_jpeg(img_ctx *c) {
    jpg_state *s = pm_calloc(1, sizeof *s, c->e);
    if (!s) return PM_ENOMEM;
    s->c = c;
    s->ci.err = jpeg_std_error(&s->em);
    s->em.error_exit = jpg_error_exit;
    s->em.emit_message = jpg_emit;
    s->em.output_message = jpg_output;
    s->ci.client_data = s;
    int rc = jpg_decode(c, s);
    free(s);
    return rc;
}

/* ----------------------------------------------------------------------------------- WebP */

static int decode_webp(img_ctx *c) {
    WebPBitstreamFeatures f;
    VP8StatusCode st = WebPGetFeatures(c->data, c->len, &f);
    if (st == VP8_STATUS_NOT_ENOUGH_DATA)
        return pm_errf(c->e, PM_EFORMAT, "%s: corrupt WebP: the file ends inside the header (truncated)", c->what);
    if (st != VP8_STATUS_OK) return pm_errf(c->e, PM_EFORMAT, "%s: corrupt WebP header (libwebp status %d)", c->what, (int)st);
    if (f.has_animation)
        return pm_errf(c->e, PM_EUNSUPPORTED, "%s: animated WebP is not supported (use a still image)", c->what);
    int rc = img_begin(c, "WebP", f.width, f.height);
    if (rc) return rc;
    size_t stride = (size_t)c->out->width * 3;
    if (!WebPDecodeRGBInto(c->data, c->len, c->out->rgb, stride * c->out->height, (int)stride))
        return pm_errf(c->e, PM_EFORMAT, "%s: corrupt or truncated WebP data", c->what);
    return PM_OK;
}

/* ------------------------------------------------------------------------------------ BMP */

static int decode_bmp(img_ctx *c) {
    const uint8_t *d = c->data;
    if (c->len < 26) return pm_errf(c->e, PM_EFORMAT, "%s: corrupt BMP: truncated header", c->what);
    uint32_t off = rd_le32(d + 10), hsize = rd_le32(d + 14);
    int64_t w, h;
    int bits, pal_entry, top_down = 0;
    uint32_t comp = 0, ncolors = 0;
    if (hsize == 12) {
        w = rd_le16(d + 18);
        h = rd_le16(d + 20);
        bits = rd_le16(d + 24);
        pal_entry = 3;
    } else if (hsize >= 40 && hsize <= 124) {
        if (c->len < 14 + 40) return pm_errf(c->e, PM_EFORMAT, "%s: corrupt BMP: truncated header", c->what);
        w = (int32_t)rd_le32(d + 18);
        h = (int32_t)rd_le32(d + 22);
        bits = rd_le16(d + 28);
        comp = rd_le32(d + 30);
        ncolors = rd_le32(d + 46);
        pal_entry = 4;
        if (h < 0) {
            top_down = 1;
            h = -h;
        }
    } else {
        return pm_errf(c->e, PM_EUNSUPPORTED, "%s: BMP header of %u bytes is not supported", c->what, hsize);
    }
    if (comp != 0 || (bits != 1 && bits != 4 && bits != 8 && bits != 24 && bits != 32))
        return pm_errf(c->e, PM_EUNSUPPORTED,
                       "%s: BMP with %d bits per pixel and compression %u is not supported "
                       "(only uncompressed 1/4/8/24/32-bit)", c->what, bits, comp);
    if (w < 0) w = 0;
    int rc = img_begin(c, "BMP", w, h);
    if (rc) return rc;
    uint8_t pal[256 * 3];
    img_grey_ramp(pal);
    if (bits <= 8) {
        uint32_t n = ncolors ? ncolors : 1u << bits;
        if (n > 256) return pm_errf(c->e, PM_EFORMAT, "%s: corrupt BMP: %u palette colours", c->what, n);
        size_t p0 = 14 + hsize;
        if (p0 + (size_t)n * pal_entry > c->len) return pm_errf(c->e, PM_EFORMAT, "%s: corrupt BMP: truncated palette", c->what);
        for (uint32_t i = 0; i < n; i++) { /* stored B, G, R(, pad) */
            const uint8_t *q = d + p0 + (size_t)i * pal_entry;
            pal[3 * i] = q[2];
            pal[3 * i + 1] = q[1];
            pal[3 * i + 2] = q[0];
        }
    }
    size_t stride = (((size_t)w * bits + 31) / 32) * 4;
    if (off > c->len || stride * (size_t)h > c->len - off)
        return pm_errf(c->e, PM_EFORMAT, "%s: corrupt BMP: pixel data is truncated", c->what);
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *in = d + off + stride * (size_t)(top_down ? y : h - 1 - y);
        uint8_t *out = c->out->rgb + (size_t)y * w * 3;
        for (int64_t x = 0; x < w; x++, out += 3) {
            if (bits == 24 || bits == 32) {
                const uint8_t *p = in + x * (bits / 8);
                out[0] = p[2];
                out[1] = p[1];
                out[2] = p[0];
            } else {
                int per = 8 / bits;
                int idx = (in[x / per] >> (8 - bits * (int)(x % per + 1))) & ((1 << bits) - 1);
                memcpy(out, pal + 3 * idx, 3);
            }
        }
    }
    return PM_OK;
}

/* ------------------------------------------------------------------------------------ API */

int pm_image_read_memory(pm_image *out, const void *data, size_t len, const char *what, int64_t max_pixels,
                         pm_err *e) {
    return pm_image_read_memory_gated(out, data, len, what, max_pixels, NULL, e);
}

int pm_image_read_memory_gated(pm_image *out, const void *data, size_t len, const char *what, int64_t max_pixels,
                               const pm_media_gate *gate, pm_err *e) {
    memset(out, 0, sizeof *out);
    if (!what) what = "image";
    const uint8_t *d = data;
    if (!d || len == 0) return pm_errf(e, PM_EFORMAT, "%s: empty file, not an image", what);
    img_ctx c = {.data = d, .len = len, .what = what, .max_pixels = max_pixels > 0 ? max_pixels : PM_IMAGE_DEFAULT_MAX_PIXELS,
                 .gate = gate, .e = e, .out = out};
    int rc;
    if (len >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) rc = decode_png(&c);
    else if (len >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) rc = decode_jpeg(&c);
    else if (len >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) rc = decode_webp(&c);
    else if (len >= 2 && d[0] == 'B' && d[1] == 'M') rc = decode_bmp(&c);
    else if (len >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6))) rc = img_decode_gif(&c);
    else if (len >= 4 && (!memcmp(d, "II*\0", 4) || !memcmp(d, "MM\0*", 4))) /* as image_file.h promises */
        rc = pm_errf(e, PM_EUNSUPPORTED, "%s: TIFF images are not supported (convert to PNG or JPEG)", what);
    else
        rc = pm_errf(e, PM_EFORMAT, "%s: not a recognised image (expected PNG, JPEG, WebP, GIF or BMP data)", what);
    free(c.row);
    free(c.all);
    img_take(&c, -c.scratch_taken); /* the scratch back */
    free(c.rows);
    if (rc) {
        pm_image_free(out);
        img_take(&c, -c.taken); /* everything back */
    }
    return rc;
}

int pm_image_read_file(pm_image *out, const char *path, int64_t max_pixels, pm_err *e) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return pm_errf(e, PM_EIO, "%s: cannot open: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = PM_OK;
    for (;;) {
        if (len == cap) {
            if (cap >= ((size_t)1 << 31)) {
                rc = pm_errf(e, PM_ELIMIT, "%s: image file is larger than 2 GiB", path);
                break;
            }
            cap = cap ? cap * 2 : 1 << 16;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                rc = pm_errf(e, PM_ENOMEM, "%s: out of memory reading the file", path);
                break;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) rc = pm_errf(e, PM_EIO, "%s: read error: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (!rc) rc = pm_image_read_memory(out, buf, len, path, max_pixels, e);
    free(buf);
    return rc;
}

void pm_image_free(pm_image *im) {
    if (!im) return;
    free(im->rgb);
    im->rgb = NULL;
    im->width = im->height = 0;
}
