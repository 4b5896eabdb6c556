/* batch.c — the engine API: several requests decoded together (continuous batching), each answer
 * collected through its own callbacks and printed when it ends. Built against an installed phi4mm:
 *
 *     cc batch.c $(pkg-config --cflags --libs phi4mm) -o batch
 *     ./batch MODEL_DIR "First question" "Second question" ...
 *
 * pm_engine_submit queues a request (its prompt prefilled by the next steps); every pm_engine_step
 * runs one forward over all live sequences and calls their callbacks; a request that ends leaves
 * the batch, and one submitted meanwhile joins it. Each answer is the one it gets alone (the
 * engine's steps give every row the same arithmetic whatever the batch), so the second line of
 * `./batch DIR a b` is `phi4mm generate -m DIR -p b`'s answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <phi4mm.h>

typedef struct answer {
    char *text;
    size_t len;
    int done, failed;
} answer;

static int on_token(void *user, int32_t token, const char *text, size_t len) {
    answer *a = user;
    (void)token;
    char *t = realloc(a->text, a->len + len + 1);
    if (!t) return 1; /* out of memory: cancel this request */
    memcpy(t + a->len, text, len);
    a->text = t;
    a->len += len;
    t[a->len] = 0;
    return 0;
}

static void on_done(void *user, pm_finish why, int prompt_tokens, int completion_tokens, const char *error) {
    answer *a = user;
    (void)prompt_tokens;
    (void)completion_tokens;
    a->done = 1;
    a->failed = why == PM_FINISH_ERROR || why == PM_FINISH_CANCELLED;
    if (error) fprintf(stderr, "batch: %s\n", error);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_DIR PROMPT... (libphi4mm %s)\n", argv[0], pm_version());
        return 2;
    }
    int n = argc - 2, rc = 0;
    char err[1024];
    pm_model *m = NULL;
    pm_engine *eng = NULL;
    answer *answers = calloc((size_t)n, sizeof *answers);
    char **prompts = calloc((size_t)n, sizeof *prompts);
    if (!answers || !prompts || pm_model_load(&m, argv[1], err, sizeof err)) {
        fprintf(stderr, "batch: %s\n", answers && prompts ? err : "out of memory");
        free(answers);
        free(prompts);
        return 1;
    }
    pm_engine_opts opts;
    pm_engine_opts_default(&opts); /* up to 16 sequences together */
    if (pm_engine_new(&eng, m, &opts, err, sizeof err)) {
        fprintf(stderr, "batch: %s\n", err);
        pm_model_free(m);
        free(answers);
        free(prompts);
        return 1;
    }
    for (int i = 0; i < n; i++) { /* all submitted at once: the engine prefills and decodes them together */
        pm_request req = {0};
        req.prompt = prompts[i] = pm_chat_prompt(NULL, argv[i + 2]);
        req.max_tokens = 32;
        pm_callbacks cb = {.on_token = on_token, .on_done = on_done, .user = &answers[i]};
        int64_t id;
        if (!req.prompt || pm_engine_submit(eng, &req, &cb, &id, err, sizeof err)) { /* planned and its media encoded here */
            fprintf(stderr, "batch: prompt %d: %s\n", i + 1, req.prompt ? err : "out of memory");
            answers[i].done = answers[i].failed = 1;
            rc = 1;
        }
    }
    while (pm_engine_live(eng) > 0)
        if (pm_engine_step(eng) < 0) { /* a failed step ends every live request (their on_done says why) */
            rc = 1;
            break;
        }
    for (int i = 0; i < n; i++) {
        printf("%s\n", answers[i].text ? answers[i].text : "");
        if (answers[i].failed) rc = 1;
        free(answers[i].text);
        free(prompts[i]);
    }
    pm_engine_free(eng);
    pm_model_free(m);
    free(answers);
    free(prompts);
    return rc;
}
