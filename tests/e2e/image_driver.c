/* image_driver.c — command driver for tests/e2e/image_diff.sh: exposes the image front-end
 * (decode, Pillow bilinear resize, PyTorch bicubic, dynamic HD plan and preprocessing) to the
 * Python oracle. Reads one command per line on stdin, answers one line per command on stdout:
 *   decode IMG OUT.raw                 -> "OK W H"   (RGB8 written to OUT.raw)
 *   decode_resize IMG DW DH OUT.raw    -> "OK W H"   (decoded then resized)
 *   resize IN.raw SW SH DW DH OUT.raw  -> "OK"
 *   bicubic IN.f32 C SH SW DH DW OUT.f32 -> "OK"
 *   plan W H MAXCROPS CROP             -> "OK GW GH NEWW NEWH TOKENS"
 *   hd IMG MAXCROPS CROP PREFIX        -> "OK NCROPS CH CW TOKENS" (PREFIX.{canvas.u8,pixels.f32,
 *                                         crop_mask.f32,canvas_mask.f32})
 * Errors answer "ERR <code> <message>". Built by the script with cc against libphi4mm.a. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vision/hd.h"
#include "vision/image_file.h"
#include "vision/resize.h"

static void *slurp(const char *path, size_t want) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *b = malloc(want ? want : 1);
    size_t n = b ? fread(b, 1, want, f) : 0;
    fclose(f);
    if (n != want) {
        free(b);
        return NULL;
    }
    return b;
}

static int spit(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(d, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

static void run(char *line) {
    char *argv[16];
    int argc = 0;
    for (char *t = strtok(line, " \t\n"); t && argc < 16; t = strtok(NULL, " \t\n")) argv[argc++] = t;
    if (argc == 0) return;
    pm_err e = {0};
    int rc = 0;
    const char *cmd = argv[0];
    if (!strcmp(cmd, "decode") && argc == 3) {
        pm_image im;
        rc = pm_image_read_file(&im, argv[1], 0, &e);
        if (!rc) {
            spit(argv[2], im.rgb, (size_t)im.width * im.height * 3);
            printf("OK %d %d\n", im.width, im.height);
            pm_image_free(&im);
        }
    } else if (!strcmp(cmd, "decode_resize") && argc == 5) {
        pm_image im;
        int dw = atoi(argv[2]), dh = atoi(argv[3]);
        rc = pm_image_read_file(&im, argv[1], 0, &e);
        if (!rc) {
            uint8_t *o = malloc((size_t)dw * dh * 3);
            rc = pm_resize_bilinear_u8(im.rgb, im.width, im.height, o, dw, dh, &e);
            if (!rc) {
                spit(argv[4], o, (size_t)dw * dh * 3);
                printf("OK %d %d\n", im.width, im.height);
            }
            free(o);
            pm_image_free(&im);
        }
    } else if (!strcmp(cmd, "resize") && argc == 7) {
        int sw = atoi(argv[2]), sh = atoi(argv[3]), dw = atoi(argv[4]), dh = atoi(argv[5]);
        uint8_t *s = slurp(argv[1], (size_t)sw * sh * 3), *o = malloc((size_t)dw * dh * 3);
        if (!s) rc = pm_errf(&e, PM_EIO, "%s: cannot read", argv[1]);
        else rc = pm_resize_bilinear_u8(s, sw, sh, o, dw, dh, &e);
        if (!rc) {
            spit(argv[6], o, (size_t)dw * dh * 3);
            printf("OK\n");
        }
        free(s);
        free(o);
    } else if (!strcmp(cmd, "bicubic") && argc == 8) {
        int c = atoi(argv[2]), sh = atoi(argv[3]), sw = atoi(argv[4]), dh = atoi(argv[5]), dw = atoi(argv[6]);
        float *s = slurp(argv[1], sizeof(float) * c * sh * sw), *o = malloc(sizeof(float) * c * dh * dw);
        if (!s) rc = pm_errf(&e, PM_EIO, "%s: cannot read", argv[1]);
        else rc = pm_hd_bicubic_f32(s, c, sh, sw, o, dh, dw, &e);
        if (!rc) {
            spit(argv[7], o, sizeof(float) * c * dh * dw);
            printf("OK\n");
        }
        free(s);
        free(o);
    } else if (!strcmp(cmd, "plan") && argc == 5) {
        pm_hd_plan p;
        rc = pm_hd_plan_compute(atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), &p, &e);
        if (!rc) printf("OK %d %d %d %d %d\n", p.w_crops, p.h_crops, p.new_w, p.new_h, p.num_tokens);
    } else if (!strcmp(cmd, "hd") && argc == 5) {
        pm_image im;
        pm_hd_image h = {0};
        rc = pm_image_read_file(&im, argv[1], 0, &e);
        if (!rc) rc = pm_hd_preprocess(&im, atoi(argv[2]), atoi(argv[3]), &h, &e);
        if (!rc) {
            char path[4096];
            int crop = atoi(argv[3]), m = crop / 14;
            snprintf(path, sizeof path, "%s.canvas.u8", argv[4]);
            spit(path, h.canvas_u8, (size_t)h.canvas_w * h.canvas_h * 3);
            snprintf(path, sizeof path, "%s.pixels.f32", argv[4]);
            spit(path, h.pixels, sizeof(float) * h.n_crops * 3 * crop * crop);
            snprintf(path, sizeof path, "%s.crop_mask.f32", argv[4]);
            spit(path, h.crop_mask, sizeof(float) * h.n_crops * m * m);
            snprintf(path, sizeof path, "%s.canvas_mask.f32", argv[4]);
            spit(path, h.canvas_mask, sizeof(float) * (h.canvas_w / 14) * (h.canvas_h / 14));
            printf("OK %d %d %d %d\n", h.n_crops, h.canvas_h, h.canvas_w, h.num_tokens);
            pm_hd_free(&h);
        }
        if (im.rgb) pm_image_free(&im);
    } else {
        rc = pm_errf(&e, PM_EINVAL, "bad command '%s' (%d args)", cmd, argc - 1);
    }
    if (rc) printf("ERR %d %s\n", rc, e.msg);
    fflush(stdout);
}

int main(void) {
    char line[8192];
    while (fgets(line, sizeof line, stdin)) run(line);
    return 0;
}
