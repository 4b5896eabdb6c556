/* image_gif.c — the first frame of a GIF (giflib) as PIL's Image.open(...).convert('RGB') gives it
 * (Pillow 9.x, GifImagePlugin with its default loading strategy: the first frame stays a palette
 * image):
 *   - the canvas is the logical screen, grown to hold the first image if that reaches past it;
 *   - it starts as palette index 0, or as the transparency index when a graphic control extension
 *     before the image sets one (PIL fills the frame-0 canvas with it; alpha is then dropped);
 *   - the image's rows (de-interlaced) are written over its rectangle, every index as decoded;
 *   - indices are looked up in the image's local colour table, else the global one, the entries
 *     either does not define read as the grey ramp (PIL's palette default; a table that is the grey
 *     ramp itself, which PIL reads as mode L, gives the same colours).
 * Later frames are not read (the model sees one still image, as PIL's first frame). Data that ends
 * before the image is complete is an error, as PIL's "image file is truncated". */
#include "image_internal.h"

#include <gif_lib.h>
#include <stdlib.h>
#include <string.h>

static int gif_read(GifFileType *g, GifByteType *buf, int n) {
    img_ctx *c = g->UserData;
    size_t k = c->len - c->pos < (size_t)n ? c->len - c->pos : (size_t)n;
    memcpy(buf, c->data + c->pos, k);
    c->pos += k;
    return (int)k;
}

static int gif_fail(img_ctx *c, int code) {
    const char *why = GifErrorString(code);
    return pm_errf(c->e, PM_EFORMAT, "%s: corrupt or truncated GIF: %s", c->what, why ? why : "unknown error");
}

/* The extensions before the first image: the last graphic control extension with its transparency
 * flag set gives the transparency index (-1: none). */
static int gif_extension(img_ctx *c, GifFileType *g, int *transparency) {
    int code;
    GifByteType *ext;
    if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) return gif_fail(c, g->Error);
    if (code == GRAPHICS_EXT_FUNC_CODE) {
        if (!ext || ext[0] < 4) /* PIL reads 4 bytes of it (an IndexError otherwise) */
            return pm_errf(c->e, PM_EFORMAT, "%s: corrupt GIF: a graphic control extension of %d bytes", c->what, ext ? ext[0] : 0);
        if (ext[1] & 1) *transparency = ext[4];
    }
    while (ext)
        if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) return gif_fail(c, g->Error);
    return PM_OK;
}

/* The first image over the canvas, as RGB. */
static int gif_image(img_ctx *c, GifFileType *g, int transparency) {
    if (DGifGetImageDesc(g) == GIF_ERROR) return gif_fail(c, g->Error);
    const GifImageDesc *d = &g->Image;
    int64_t x0 = d->Left, y0 = d->Top, w = d->Width, h = d->Height;
    if (w <= 0 || h <= 0) return pm_errf(c->e, PM_EFORMAT, "%s: corrupt GIF: a %lldx%lld image", c->what, (long long)w, (long long)h);
    int64_t W = x0 + w > g->SWidth ? x0 + w : g->SWidth, H = y0 + h > g->SHeight ? y0 + h : g->SHeight;
    int rc = img_begin(c, "GIF", W, H);
    if (rc) return rc;
    uint8_t pal[256 * 3];
    img_grey_ramp(pal);
    const ColorMapObject *cm = d->ColorMap ? d->ColorMap : g->SColorMap;
    for (int i = 0; cm && i < cm->ColorCount && i < 256; i++) {
        pal[3 * i] = cm->Colors[i].Red;
        pal[3 * i + 1] = cm->Colors[i].Green;
        pal[3 * i + 2] = cm->Colors[i].Blue;
    }
    const uint8_t *bg = pal + 3 * (transparency >= 0 ? transparency : 0);
    uint8_t *rgb = c->out->rgb;
    for (int64_t p = 0; p < W * H; p++) memcpy(rgb + 3 * p, bg, 3);
    if (!(c->row = malloc((size_t)w))) return pm_errf(c->e, PM_ENOMEM, "%s: out of memory", c->what);
    /* interlaced rows come in four passes: every 8th from 0, every 8th from 4, every 4th from 2,
     * every 2nd from 1 */
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    for (int pass = d->Interlace ? 0 : 3; pass < 4; pass++)
        for (int64_t y = d->Interlace ? start[pass] : 0; y < h; y += d->Interlace ? step[pass] : 1) {
            if (DGifGetLine(g, c->row, (int)w) == GIF_ERROR) return gif_fail(c, g->Error);
            uint8_t *out = rgb + ((y0 + y) * W + x0) * 3;
            for (int64_t x = 0; x < w; x++) memcpy(out + 3 * x, pal + 3 * c->row[x], 3);
        }
    return PM_OK;
}

int img_decode_gif(img_ctx *c) {
    int err = 0, transparency = -1, rc = PM_OK;
    GifFileType *g = DGifOpen(c, gif_read, &err);
    if (!g) return gif_fail(c, err);
    for (int done = 0; !done && !rc;) {
        GifRecordType t;
        if (DGifGetRecordType(g, &t) == GIF_ERROR) {
            rc = gif_fail(c, g->Error);
        } else if (t == EXTENSION_RECORD_TYPE) {
            rc = gif_extension(c, g, &transparency);
        } else if (t == IMAGE_DESC_RECORD_TYPE) {
            rc = gif_image(c, g, transparency);
            done = 1;
        } else {
            rc = pm_errf(c->e, PM_EFORMAT, "%s: GIF without an image", c->what);
        }
    }
    DGifCloseFile(g, &err);
    return rc;
}
