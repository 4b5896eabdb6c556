/* cli_media.c — see cli_media.h. */
#include "cli_media.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"

void cli_media_free(cli_media *ms) {
    for (int i = 0; i < ms->n_audio; i++) pm_audio_in_free(&ms->audio[i]);
    for (int i = 0; i < ms->n_image; i++) pm_image_in_free(&ms->image[i]);
}

/* Decodes a clip, stopping once the request's clips run over max_seconds in all (<= 0: no limit):
 * a small compressed file can decode to many GB. */
int cli_load_audio(const char *cmd, cli_media *ms, const char *path, double max_seconds) {
    char err[1024];
    size_t len;
    if (ms->n_audio >= CLI_MAX_MEDIA) return cli_fail(cmd, "too many audio clips (max %d)", CLI_MAX_MEDIA);
    double before = 0;
    for (int i = 0; i < ms->n_audio; i++) before += (double)ms->audio[i].n_samples / ms->audio[i].sample_rate;
    if (max_seconds > 0 && before >= max_seconds)
        return cli_fail(cmd, "%s: the clips before it already reach the limit of %.4f s per request (--max-audio-seconds)", path,
                        max_seconds);
    void *buf = cli_read_input(path, &len, err, sizeof err);
    if (!buf) return cli_fail(cmd, "%s", err);
    double left = max_seconds > 0 ? max_seconds - before : 0.0;
    int rc = pm_audio_decode_max(buf, len, path, left, &ms->audio[ms->n_audio], err, sizeof err);
    free(buf);
    if (rc == PM_ELIMIT && before > 0)
        return cli_fail(cmd, "%s: the clips run over the limit of %.4f s per request (%.4f s before this one; --max-audio-seconds)", path,
                        max_seconds, before);
    if (rc) return cli_fail(cmd, "%s", err);
    ms->n_audio++;
    return 0;
}

int cli_load_image(const char *cmd, cli_media *ms, const char *path) {
    char err[1024];
    size_t len;
    if (ms->n_image >= CLI_MAX_MEDIA) return cli_fail(cmd, "too many images (max %d)", CLI_MAX_MEDIA);
    void *buf = cli_read_input(path, &len, err, sizeof err);
    if (!buf) return cli_fail(cmd, "%s", err);
    pm_limits lim;
    pm_limits_default(&lim);
    int rc = pm_image_decode(buf, len, path, lim.max_image_pixels, &ms->image[ms->n_image], err, sizeof err);
    free(buf);
    if (rc) return cli_fail(cmd, "%s", err);
    ms->n_image++;
    return 0;
}

static int has_placeholder(const char *p, const char *kind) {
    char pat[32];
    snprintf(pat, sizeof pat, "<|%s_", kind);
    return strstr(p, pat) != NULL;
}

char *cli_media_prompt(const cli_media *ms, const char *prompt) {
    char *user = malloc(strlen(prompt) + 32 * (size_t)(ms->n_image + ms->n_audio) + 1);
    if (!user) return NULL;
    user[0] = 0;
    int add_img = ms->n_image && !has_placeholder(prompt, "image"), add_aud = ms->n_audio && !has_placeholder(prompt, "audio");
    for (int i = 0; add_img && i < ms->n_image; i++) sprintf(user + strlen(user), "<|image_%d|>", i + 1);
    for (int i = 0; add_aud && i < ms->n_audio; i++) sprintf(user + strlen(user), "<|audio_%d|>", i + 1);
    if (add_img || add_aud)
        fprintf(stderr, "phi4mm: note: the prompt has no %s placeholders; prepended %s\n", add_img && add_aud ? "image/audio" : add_img ? "image" : "audio",
                user);
    return strcat(user, prompt);
}

void cli_media_attach(const cli_media *ms, pm_request *req) {
    req->images = ms->image;
    req->n_images = ms->n_image;
    req->audios = ms->audio;
    req->n_audios = ms->n_audio;
}
