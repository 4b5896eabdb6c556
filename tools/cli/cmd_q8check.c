/* cmd_q8check.c — `phi4mm q8check -m DIR [--prompts N] [--tokens T] [--batch B] [--seed S]`:
 * how closely `--weights q8` follows bf16. Builds N synthetic chat prompts (random sentences from
 * a fixed word list, 4..40 words, seeded), decodes T greedy tokens for each with the bf16 load and
 * with the q8 load of the same checkpoint (B sequences at a time through pm_engine), and reports:
 * the first-token match rate, the mean common prefix, the equal positions, and the number of
 * identical continuations. For the fixture cases (audio, image, mixed) see `parity --weights q8`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"

static const char *const words[] = {
    "the", "a", "river", "mountain", "quickly", "explain", "why", "how", "computer", "music", "history", "of", "in", "and",
    "write", "short", "poem", "about", "summer", "rain", "city", "lights", "what", "is", "best", "way", "to", "learn",
    "language", "translate", "this", "into", "French", "list", "three", "reasons", "for", "coffee", "tea", "describe",
    "image", "sound", "ocean", "forest", "number", "seven", "2024", "price", "market", "science", "energy", "solar",
    "wind", "please", "story", "dragon", "robot", "kitchen", "recipe", "bread", "walk", "dog", "morning", "quiet",
    "library", "book", "chapter", "question", "answer", "simple", "complex", "idea", "future", "past", "travel", "train",
};

typedef struct run_rec {
    int32_t tok[256];
    int n;
} run_rec;

static int rec_token(void *user, int32_t token, const char *text, size_t len) {
    (void)text, (void)len;
    run_rec *r = user;
    if (r->n < 256) r->tok[r->n++] = token;
    return 0;
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Greedy continuations of every prompt, `batch` sequences at a time. */
static int run_all(pm_model *m, char **prompts, int n, int tokens, int batch, run_rec *out, char *err, size_t errlen) {
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.max_seqs = batch;
    pm_engine *eng = NULL;
    if (pm_engine_new(&eng, m, &o, err, errlen)) return -1;
    int rc = 0;
    for (int i0 = 0; i0 < n && !rc; i0 += batch) {
        for (int i = i0; i < n && i < i0 + batch && !rc; i++) {
            pm_request req = {0};
            req.prompt = prompts[i];
            req.max_tokens = tokens;
            pm_callbacks cb = {.on_token = rec_token, .user = &out[i]};
            rc = pm_engine_submit(eng, &req, &cb, NULL, err, errlen);
        }
        while (!rc && pm_engine_live(eng) > 0)
            if (pm_engine_step(eng) < 0) rc = snprintf(err, errlen, "engine step failed") > 0 ? -1 : -1;
        fprintf(stderr, "\r[q8check] %s: %d/%d prompts", pm_weight_format_name(pm_model_weights(m)), i0 + batch < n ? i0 + batch : n, n);
    }
    fprintf(stderr, "\n");
    pm_engine_free(eng);
    return rc;
}

int pm_cmd_q8check(int argc, char **argv) {
    const char *cmd = "q8check", *dir = NULL;
    long n = 100, tokens = 16, batch = 16, seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fprintf(stderr, "usage: phi4mm q8check -m MODEL_DIR [--prompts N (100)] [--tokens T (16)] [--batch B (16)] [--seed S]\n"
                            "  greedy agreement of --weights q8 with bf16 on N synthetic prompts\n");
            return 0;
        }
        if (!v) return cli_fail(cmd, "option %s needs a value", a);
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) dir = v;
        else if (!strcmp(a, "--prompts")) { if (cli_int(v, 1, 100000, &n)) return cli_fail(cmd, "--prompts must be 1..100000"); }
        else if (!strcmp(a, "--tokens")) { if (cli_int(v, 1, 256, &tokens)) return cli_fail(cmd, "--tokens must be 1..256"); }
        else if (!strcmp(a, "--batch")) { if (cli_int(v, 1, 64, &batch)) return cli_fail(cmd, "--batch must be 1..64"); }
        else if (!strcmp(a, "--seed")) { if (cli_int(v, 0, 0x7fffffffL, &seed)) return cli_fail(cmd, "--seed must be >= 0"); }
        else return cli_fail(cmd, "unknown option '%s' (see --help)", a);
        i++;
    }
    if (!dir) return cli_fail(cmd, "missing -m MODEL_DIR");
    char **prompts = calloc((size_t)n, sizeof *prompts);
    run_rec *rb = calloc((size_t)n, sizeof *rb), *rq = calloc((size_t)n, sizeof *rq);
    uint32_t s = (uint32_t)seed * 2654435761u + 1u;
    for (int i = 0; i < n; i++) {
        char user[1024] = "";
        int nw = 4 + (int)(lcg(&s) % 37);
        for (int w = 0; w < nw; w++) {
            strcat(user, words[lcg(&s) % (sizeof words / sizeof words[0])]);
            strcat(user, w + 1 < nw ? " " : (lcg(&s) % 2 ? "?" : "."));
        }
        prompts[i] = pm_chat_prompt(NULL, user);
    }
    char err[1024];
    int rc = 0;
    pm_model *mb = NULL, *mq = NULL;
    pm_load_options lq = {.weights = PM_WEIGHTS_Q8};
    double t0 = cli_now(), tb = 0, tq = 0;
    if (pm_model_load(&mb, dir, err, sizeof err) || run_all(mb, prompts, (int)n, (int)tokens, (int)batch, rb, err, sizeof err)) rc = 1;
    tb = cli_now() - t0;
    pm_model_free(mb);
    t0 = cli_now();
    if (!rc && (pm_model_load_opts(&mq, dir, &lq, err, sizeof err) || run_all(mq, prompts, (int)n, (int)tokens, (int)batch, rq, err, sizeof err)))
        rc = 1;
    tq = cli_now() - t0;
    pm_model_free(mq);
    if (rc) rc = cli_fail(cmd, "%s", err);
    else {
        int first = 0, identical = 0;
        long prefix = 0, same = 0, total = 0;
        for (int i = 0; i < n; i++) {
            int p = 0, k = rb[i].n < rq[i].n ? rb[i].n : rq[i].n;
            while (p < k && rb[i].tok[p] == rq[i].tok[p]) p++;
            for (int j = 0; j < k; j++) same += rb[i].tok[j] == rq[i].tok[j];
            first += k > 0 && rb[i].tok[0] == rq[i].tok[0];
            identical += p == rb[i].n && rb[i].n == rq[i].n;
            prefix += p;
            total += rb[i].n;
        }
        printf("q8check %s: %ld prompts x %ld greedy tokens (bf16 run %.1f s, q8 run %.1f s incl. load)\n", dir, n, tokens, tb, tq);
        printf("  first token equal      %d/%ld (%.1f%%)\n", first, n, 100.0 * first / n);
        printf("  identical continuation %d/%ld (%.1f%%)\n", identical, n, 100.0 * identical / n);
        printf("  common prefix          %ld/%ld tokens (%.1f%%), mean %.2f per prompt\n", prefix, total, total ? 100.0 * prefix / total : 0.0,
               (double)prefix / n);
        printf("  equal positions        %ld/%ld (%.1f%%)\n", same, total, total ? 100.0 * same / total : 0.0);
    }
    for (int i = 0; i < n; i++) free(prompts[i]);
    free(prompts);
    free(rb);
    free(rq);
    return rc;
}
