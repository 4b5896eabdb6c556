/* cmd_tokenize.c — `phi4mm tokenize`: how many tokens the decoder takes for a prompt, its images
 * and clips, without running the model: the chat template applied and each media placeholder
 * expanded to its item's positions (an image's HD crops, a clip's frames), as `generate` and the
 * server plan it (pm_engine_prompt_ids; the server's /tokenize). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_media.h"
#include "cli_util.h"
#include "commands.h"
#include "tok/chat.h"

static void usage_tokenize(void) {
    fprintf(stderr,
            "usage: phi4mm tokenize -m MODEL_DIR (-p TEXT | -f FILE) [options]\n"
            "  the tokens the decoder takes for a prompt (the prompt_tokens generate and the server count),\n"
            "  nothing run: \"N tokens (T text, I image, A audio)\" on stdout\n"
            "  -p, --prompt TEXT     user message (wrapped in the chat template); may hold <|image_N|>/<|audio_N|>\n"
            "  -f, --prompt-file FILE  ... read from FILE (- : standard input), its final line endings dropped\n"
            "  --system TEXT         system message\n"
            "  --raw                 PROMPT is the whole model input (no chat template)\n"
            "  --image FILE, --audio FILE  media (repeatable), in placeholder order; --max-crops N as generate's\n"
            "  --ids                 the ids too, a line of them (a media position holds its placeholder's id)\n"
            "  --json                {\"count\", \"text\", \"image\", \"audio\", \"tokens\"} instead\n");
}

int pm_cmd_tokenize(int argc, char **argv) {
    const char *cmd = "tokenize", *dir = NULL, *prompt = NULL, *prompt_file = NULL, *system = NULL;
    int raw = 0, ids_out = 0, json = 0, rc = 0;
    long max_crops = 0;
    cli_media ms = {0};
    const char *audio_paths[CLI_MAX_MEDIA];
    int n_audio_paths = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_tokenize();
            cli_media_free(&ms);
            return 0;
        }
        if (!strcmp(a, "--raw")) raw = 1;
        else if (!strcmp(a, "--ids")) ids_out = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!v) rc = cli_fail(cmd, "option %s needs a value", a);
        else {
            i++;
            if (!strcmp(a, "-m") || !strcmp(a, "--model")) dir = v;
            else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
            else if (!strcmp(a, "-f") || !strcmp(a, "--prompt-file")) prompt_file = v;
            else if (!strcmp(a, "--system")) system = v;
            else if (!strcmp(a, "--image")) rc = cli_load_image(cmd, &ms, v);
            else if (!strcmp(a, "--audio")) {
                if (n_audio_paths >= CLI_MAX_MEDIA) rc = cli_fail(cmd, "too many --audio files (max %d)", CLI_MAX_MEDIA);
                else audio_paths[n_audio_paths++] = v;
            } else if (!strcmp(a, "--max-crops")) {
                if (cli_int(v, 1, 4096, &max_crops)) rc = cli_fail(cmd, "--max-crops must be 1..4096, got '%s'", v);
            } else rc = cli_fail(cmd, "unknown option '%s' (see --help)", a);
        }
    }
    char *file_text = NULL;
    if (!rc && !dir) rc = cli_fail(cmd, "missing -m MODEL_DIR");
    if (!rc) rc = cli_prompt_arg(cmd, prompt, prompt_file, &prompt, &file_text);
    if (!rc) rc = cli_utf8_text(cmd, "--system", system);
    for (int i = 0; i < n_audio_paths && !rc; i++) rc = cli_load_audio(cmd, &ms, audio_paths[i], 0);
    char *user = rc ? NULL : cli_media_prompt(&ms, prompt), *full = NULL;
    if (!rc && user) full = raw ? strdup(user) : pm_chat_prompt(system, user);
    if (!rc && !full) rc = cli_fail(cmd, "out of memory");
    free(user);
    free(file_text);
    pm_model *m = NULL;
    pm_engine *eng = NULL;
    char err[1024];
    if (!rc && pm_model_load(&m, dir, err, sizeof err)) rc = cli_fail(cmd, "%s", err);
    if (!rc && pm_engine_new(&eng, m, NULL, err, sizeof err)) rc = cli_fail(cmd, "%s", err);
    int32_t *ids = NULL;
    size_t n = 0;
    if (!rc) {
        pm_request req = {0};
        req.prompt = full;
        cli_media_attach(&ms, &req);
        req.max_crops = (int)max_crops;
        if (pm_engine_prompt_ids(eng, &req, &ids, &n, err, sizeof err)) rc = cli_fail(cmd, "%s", err);
    }
    if (!rc) {
        size_t img = 0, aud = 0;
        for (size_t i = 0; i < n; i++) {
            img += ids[i] == PM_TOK_IMAGE_ID;
            aud += ids[i] == PM_TOK_AUDIO_ID;
        }
        if (json) {
            printf("{\"count\": %zu, \"text\": %zu, \"image\": %zu, \"audio\": %zu, \"tokens\": [", n, n - img - aud, img, aud);
            for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", (int)ids[i]);
            printf("]}\n");
        } else {
            printf("%zu tokens (%zu text, %zu image, %zu audio)\n", n, n - img - aud, img, aud);
            for (size_t i = 0; ids_out && i < n; i++) printf(i + 1 < n ? "%d " : "%d\n", (int)ids[i]);
        }
    }
    free(ids);
    free(full);
    pm_engine_free(eng);
    pm_model_free(m);
    cli_media_free(&ms);
    return rc;
}
