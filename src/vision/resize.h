/* resize.h — Pillow-exact bilinear resampling of RGB8 images.
 *
 * The official image processor resizes with torchvision on a PIL image, which is PIL's
 * Image.resize(..., BILINEAR): an antialiased, separable, fixed-point convolution (Pillow 9.x
 * libImaging/Resample.c). This module reproduces it byte for byte; see resize.c for the details
 * that matter (coefficient rounding, pass order, pass skipping). */
#ifndef PM_VISION_RESIZE_H
#define PM_VISION_RESIZE_H

#include <stdint.h>
#include "util/err.h"

/* Resizes src [sh, sw, 3] (RGB8, row-major) to dst [dh, dw, 3], byte-identical to PIL's
 * Image.resize((dw, dh), Image.BILINEAR) on an RGB image. All sizes must be >= 1; dst must not
 * alias src. Returns PM_OK, PM_EINVAL (bad size) or PM_ENOMEM. */
int pm_resize_bilinear_u8(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh, pm_err *e);

#endif
