/* hd.h — the official "dynamic HD" image preprocessing for ONE image (Phi4MMImageProcessor:
 * dynamic_preprocess + preprocess), bit-faithful to the reference:
 *   crop grid  ceil(W/crop) x ceil(H/crop) crops, or, when that exceeds dynamic_hd, the i x j
 *              grid (i*j <= dynamic_hd) of closest aspect ratio (find_closest_aspect_ratio);
 *   canvas     PIL-bilinear resize to fit the grid keeping the aspect ratio (resize.h), white
 *              padding right/bottom, patch mask zeroed over padding of >= 14 px;
 *   tensors    x/255 normalised to [-1, 1]; global view = PyTorch bicubic interpolation of the
 *              normalised canvas to crop x crop (align_corners=False, no antialias, float32);
 *              crops global first, then the grid row-major;
 *   tokens     num_img_tokens = 256 + 1 + sum(mask2) + rows(mask2) + 16 with mask2 the patch mask
 *              subsampled 2x2 per crop (for crop 448: 16 x 16 per crop).
 * The official processor pads the crop count to the largest image of a batch; we process images
 * one at a time, so there is no such padding here (the token count is unaffected). */
#ifndef PM_VISION_HD_H
#define PM_VISION_HD_H

#include <stdint.h>
#include "util/err.h"
#include "vision/image_file.h"

typedef struct pm_hd_image {
    int n_crops;            /* 1 + h_crops * w_crops (global first) */
    float *pixels;          /* [n_crops, 3, crop, crop] normalised (x/255*2-1); global view first */
    float *crop_mask;       /* [n_crops, crop/14, crop/14] patch-level attention mask (global all ones) */
    int canvas_h, canvas_w; /* HD canvas size (image_sizes) */
    int h_crops, w_crops;
    int num_tokens;         /* num_img_tokens */
    uint8_t *canvas_u8;     /* [canvas_h, canvas_w, 3] resized + white padded canvas (for parity) */
    float *canvas_mask;     /* [canvas_h/14, canvas_w/14] (hd_attention_mask) */
} pm_hd_image;

/* The geometry decided from the image size alone. */
typedef struct pm_hd_plan {
    int w_crops, h_crops;   /* crop grid */
    int canvas_w, canvas_h; /* crop * grid */
    int new_w, new_h;       /* resized image size (top-left of the canvas) */
    int pad_w, pad_h;       /* white padding right / bottom */
    int num_tokens;
} pm_hd_plan;

/* Computes the crop grid, resize target and token count for a width x height image, with the
 * official floating-point arithmetic. crop must be a positive multiple of 14; dynamic_hd >= 1.
 * Fails with PM_EINVAL when the official code would raise (aspect ratio so extreme that the
 * resized side is under 10 px, or nothing left unmasked). */
int pm_hd_plan_compute(int width, int height, int dynamic_hd, int crop, pm_hd_plan *p, pm_err *e);

/* Token count without doing the work (placeholder expansion, request validation); negative
 * PM_E* status when the image would be rejected. */
int pm_hd_num_tokens(int width, int height, int dynamic_hd, int crop);

/* Runs the whole preprocessing of one RGB image (dynamic_hd = preprocessor_config "dynamic_hd",
 * 36 for the real model; crop = 448). On success *out owns its buffers (pm_hd_free). */
int pm_hd_preprocess(const pm_image *im, int dynamic_hd, int crop, pm_hd_image *out, pm_err *e);
void pm_hd_free(pm_hd_image *h);

/* PyTorch F.interpolate(mode='bicubic', align_corners=False, antialias=False) on float32
 * [channels, sh, sw] -> [channels, dh, dw], replicating the ATen CPU kernel's arithmetic
 * (A = -0.75, float coefficients, clamped taps, x taps summed first then y). */
int pm_hd_bicubic_f32(const float *src, int channels, int sh, int sw, float *dst, int dh, int dw, pm_err *e);

#endif
