/* image_internal.h — what the image decoders share (image_file.c: PNG, JPEG, WebP, BMP and the
 * API; image_gif.c: GIF): the decoding context, the output's allocation under the pixel cap and the
 * memory gate, PIL's default palette. */
#ifndef PM_VISION_IMAGE_INTERNAL_H
#define PM_VISION_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* jpeglib.h needs FILE */

#include <jpeglib.h>
#include <png.h>

#include "image_file.h"

typedef struct img_ctx {
    const uint8_t *data;
    size_t len, pos;
    const char *what;
    int64_t max_pixels;
    const pm_media_gate *gate; /* optional (phi4mm.h) */
    int64_t taken;             /* bytes the gate granted */
    int gate_rc;               /* its refusal inside libpng's error path */
    int64_t scratch_taken;     /* of which for the decoder's whole-image scratch, given back at the end */
    pm_err *e;
    pm_image *out;
    uint8_t *row;         /* decoder scratch */
    uint8_t *all;         /* interlaced PNG: whole decoded image */
    png_bytep *rows;
    char msg[JMSG_LENGTH_MAX > 256 ? JMSG_LENGTH_MAX : 256];
} img_ctx;

/* Asks the gate for bytes more (bytes < 0: gives back); PM_EBUSY / PM_ELIMIT with e set when it
 * refuses. */
int img_take(img_ctx *c, int64_t bytes);

/* Validates the header size (zero, over the pixel cap) and allocates the RGB output. */
int img_begin(img_ctx *c, const char *fmt, int64_t w, int64_t h);

/* PIL's palette before the file's entries are applied: the grey ramp. */
void img_grey_ramp(uint8_t pal[256 * 3]);

/* The first frame of a GIF (image_gif.c). */
int img_decode_gif(img_ctx *c);

#endif
