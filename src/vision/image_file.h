/* image_file.h — decoding user images (PNG, JPEG, WebP, GIF, BMP) into RGB8 exactly as
 * PIL.Image.open(...).convert('RGB') does, which is what the official processor sees (a GIF: its
 * first frame, as PIL's).
 *
 * The format is recognised from the bytes, never from the file name. The header size is checked
 * against a pixel cap before any pixel is decoded. TIFF and animated WebP are refused with a clear
 * message. */
#ifndef PM_VISION_IMAGE_FILE_H
#define PM_VISION_IMAGE_FILE_H

#include <stddef.h>
#include <stdint.h>
#include "phi4mm.h"
#include "util/err.h"

/* Default pixel cap (width * height) used when a caller passes max_pixels <= 0. */
#define PM_IMAGE_DEFAULT_MAX_PIXELS ((int64_t)40 * 1000 * 1000)

typedef struct pm_image {
    uint8_t *rgb;      /* [height, width, 3], row-major, malloc'd */
    int width, height;
} pm_image;

/* Decodes the image file at path (see pm_image_read_memory). Errors name the path. */
int pm_image_read_file(pm_image *out, const char *path, int64_t max_pixels, pm_err *e);

/* Decodes an in-memory PNG / JPEG / WebP / GIF / BMP into out->rgb with PIL's convert('RGB') semantics:
 * palette looked up (entries the file does not define read as the grey ramp, as in PIL), grey
 * replicated, alpha dropped without compositing, 16-bit channels reduced to their high byte
 * except 16-bit grey, which PIL reads as mode I and clips to 0..255, CMYK JPEG inverted (Adobe
 * convention) then converted with PIL's cmyk2rgb. No gamma, ICC or EXIF orientation is applied.
 * `what` names the source in error messages. max_pixels <= 0 selects
 * PM_IMAGE_DEFAULT_MAX_PIXELS. Returns PM_OK; PM_EFORMAT (not an image, corrupt, truncated,
 * zero-size), PM_EUNSUPPORTED (TIFF, animated WebP, exotic BMP/JPEG variants), PM_ELIMIT (over the
 * pixel cap), PM_ENOMEM. On failure *out is zeroed. */
int pm_image_read_memory(pm_image *out, const void *data, size_t len, const char *what, int64_t max_pixels,
                         pm_err *e);

/* Same, asking `gate` (phi4mm.h: pm_media_gate; may be NULL) for the pixels' bytes before they are
 * allocated, and for an interlaced PNG's whole-image scratch (given back before returning):
 * PM_EBUSY or PM_ELIMIT when it refuses. */
int pm_image_read_memory_gated(pm_image *out, const void *data, size_t len, const char *what, int64_t max_pixels,
                               const pm_media_gate *gate, pm_err *e);

/* Frees the pixels; safe on a zeroed or already-freed image. */
void pm_image_free(pm_image *im);

#endif
