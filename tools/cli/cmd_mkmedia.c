/* cmd_mkmedia.c — `phi4mm mkmedia --out DIR`: writes a 2-second tone (tone.wav, 16 kHz) and a
 * 640x480 test pattern (pattern.png) so the demo runs with nothing downloaded. */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "audio/sf_lib.h"
#include "cli_util.h"
#include "commands.h"

static int write_wav(const pm_sf *lib, const char *path) {
    SF_INFO info = {0};
    info.samplerate = 16000;
    info.channels = 1;
    info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
    SNDFILE *f = lib->sf_open(path, SFM_WRITE, &info);
    if (!f) return -1;
    enum { N = 32000 };
    static short s[N];
    for (int i = 0; i < N; i++) {
        double t = i / 16000.0;
        s[i] = (short)(6000 * (sin(2 * M_PI * 220 * t) + 0.5 * sin(2 * M_PI * 587 * t)) * (1 - t / 2));
    }
    sf_count_t w = lib->sf_write_short(f, s, N);
    lib->sf_close(f);
    return w == N ? 0 : -1;
}

static int write_png(const char *path) {
    enum { W = 640, H = 480 };
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    unsigned char *row = malloc(W * 3);
    if (!p || !info || !row || setjmp(png_jmpbuf(p))) {
        png_destroy_write_struct(&p, &info);
        fclose(fp);
        free(row);
        return -1;
    }
    png_init_io(p, fp);
    png_set_IHDR(p, info, W, H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(p, info);
    for (int y = 0; y < H; y++) {
        for (int x = 0; x < W; x++) {
            int cx = x - W / 2, cy = y - H / 2, in = cx * cx + cy * cy < 120 * 120;
            row[3 * x] = (unsigned char)(in ? 230 : x * 255 / W);
            row[3 * x + 1] = (unsigned char)(in ? 60 : y * 255 / H);
            row[3 * x + 2] = (unsigned char)(((x / 40 + y / 40) & 1) ? 200 : 40);
        }
        png_write_row(p, row);
    }
    png_write_end(p, NULL);
    png_destroy_write_struct(&p, &info);
    fclose(fp);
    free(row);
    return 0;
}

int pm_cmd_mkmedia(int argc, char **argv) {
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else {
            fprintf(stderr, "usage: phi4mm mkmedia --out DIR   (writes tone.wav and pattern.png for the demo)\n");
            return !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (!out) return cli_fail("mkmedia", "missing --out DIR");
    mkdir(out, 0755);
    char p[4096];
    snprintf(p, sizeof p, "%s/tone.wav", out);
    pm_err e = {0};
    const pm_sf *lib = pm_sf_lib(p, &e);
    if (!lib) return cli_fail("mkmedia", "%s", e.msg);
    if (write_wav(lib, p)) return cli_fail("mkmedia", "%s: cannot write", p);
    snprintf(p, sizeof p, "%s/pattern.png", out);
    if (write_png(p)) return cli_fail("mkmedia", "%s: cannot write", p);
    return 0;
}
