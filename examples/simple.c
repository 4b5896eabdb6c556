/* simple.c — the smallest program around libphi4mm: one chat turn, with images and audio clips
 * if given, its answer streamed to stdout. Built against an installed phi4mm with
 *
 *     cc simple.c $(pkg-config --cflags --libs phi4mm) -o simple
 *     ./simple MODEL_DIR "Describe the image." photo.jpg
 *
 * Media files: an image (PNG, JPEG, WebP, GIF, BMP) or an audio clip (WAV, FLAC, Ogg, MP3, M4A,
 * WebM), told apart by their bytes; each gets its <|image_N|> / <|audio_N|> placeholder before the
 * prompt. The same turn through `phi4mm generate -m DIR -p PROMPT --image F` gives the same text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <phi4mm.h>

enum { MAX_MEDIA = 8 };

static int print_text(void *user, int32_t token, const char *text, size_t len) {
    (void)user;
    (void)token;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0; /* non-zero would cancel the request */
}

static void on_done(void *user, pm_finish why, int prompt_tokens, int completion_tokens, const char *error) {
    *(pm_finish *)user = why;
    if (error) fprintf(stderr, "simple: %s\n", error);
    fprintf(stderr, "\n[%d prompt tokens, %d generated]\n", prompt_tokens, completion_tokens);
}

/* A whole file in memory (NULL on failure). */
static void *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n == cap) {
            char *p = realloc(buf, cap = cap ? 2 * cap : 1 << 20);
            if (!p) break;
            buf = p;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    *len = n;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc - 3 > MAX_MEDIA) {
        fprintf(stderr, "usage: %s MODEL_DIR PROMPT [IMAGE_OR_AUDIO_FILE...] (libphi4mm %s)\n", argv[0], pm_version());
        return 2;
    }
    char err[1024];
    pm_model *m = NULL;
    if (pm_model_load(&m, argv[1], err, sizeof err)) {
        fprintf(stderr, "simple: %s\n", err);
        return 1;
    }
    pm_image_in images[MAX_MEDIA];
    pm_audio_in audios[MAX_MEDIA];
    int n_images = 0, n_audios = 0, rc = 0;
    char user[4096] = "";
    for (int i = 3; i < argc && !rc; i++) {
        size_t len = 0;
        void *bytes = read_file(argv[i], &len);
        if (!bytes) {
            fprintf(stderr, "simple: cannot read %s\n", argv[i]);
            rc = 1;
        } else if (pm_image_decode(bytes, len, argv[i], 0, &images[n_images], err, sizeof err) == PM_OK) {
            snprintf(user + strlen(user), sizeof user - strlen(user), "<|image_%d|>", ++n_images);
        } else if (pm_audio_decode(bytes, len, argv[i], &audios[n_audios], err, sizeof err) == PM_OK) {
            snprintf(user + strlen(user), sizeof user - strlen(user), "<|audio_%d|>", ++n_audios);
        } else {
            fprintf(stderr, "simple: %s is neither an image nor an audio clip: %s\n", argv[i], err);
            rc = 1;
        }
        free(bytes);
    }
    snprintf(user + strlen(user), sizeof user - strlen(user), "%s", argv[2]);
    char *prompt = rc ? NULL : pm_chat_prompt(NULL, user); /* <|user|>...<|end|><|assistant|> */
    pm_request req = {0};
    req.prompt = prompt;
    req.images = images;
    req.n_images = n_images;
    req.audios = audios;
    req.n_audios = n_audios;
    req.max_tokens = 64; /* greedy: the sampling fields left at zero */
    pm_finish why = PM_FINISH_ERROR;
    pm_callbacks cb = {.on_token = print_text, .on_done = on_done, .user = &why};
    if (prompt && pm_generate(m, &req, NULL, &cb, err, sizeof err) != PM_OK) {
        fprintf(stderr, "simple: %s\n", err);
        rc = 1;
    } else if (prompt && why == PM_FINISH_ERROR) {
        rc = 1;
    }
    free(prompt);
    for (int i = 0; i < n_images; i++) pm_image_in_free(&images[i]);
    for (int i = 0; i < n_audios; i++) pm_audio_in_free(&audios[i]);
    pm_model_free(m);
    return rc;
}
