/* cmd_perplexity.c — `phi4mm perplexity -m DIR (-f FILE | -p TEXT | --ids LIST) [options]`: how well
 * the model predicts a text, as exp(mean negative log-likelihood) of its tokens. The text is
 * tokenized as the tokenizer reads it (pm_model_tokenize: no chat template, a placeholder's
 * spelling plain text, longer than the context if need be) and read in windows of --ctx tokens
 * that start every --stride tokens (Hugging Face's "perplexity of fixed-length models" sliding
 * window): each window scores only the tokens no earlier window scored, so every token but the
 * first is scored once, with at least ctx - stride tokens before it (stride = ctx: disjoint
 * windows, each one's first token unscored). The scores are the engine's prompt log-probabilities
 * (pm_request.prompt_logprobs, from the window's own tokens on: the context rows cost no lm_head
 * pass), windows decoded --batch at a time.
 *
 * --compare q8|compute-bf16|kv-bf16 scores the same windows again with one opt-in that leaves
 * the official numbers (int8 weights, bf16 products, a bf16 KV cache) and reports how far it moves
 * the model (llama.cpp's perplexity statistics): the two perplexities and their ratio, the mean
 * change of a token's log-likelihood, how often the two agree on the most likely next token, the
 * RMS of the change of the text token's probability, and the KL divergence of the variant's next-
 * token distribution from the base's (mean, median, 99th percentile, largest). The two run in
 * lockstep, both loaded (the KL needs both whole distributions of a position at once): a step of
 * the base engine, whose scored rows' log-probabilities wait in a pool (pm_callbacks.
 * on_prompt_logits; --batch x 512 rows at most, 0.8 MB a row on Phi-4's vocabulary), then the
 * same step of the variant's, which takes them. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "engine/sampler.h"

static void usage_perplexity(void) {
    fprintf(stderr,
            "usage: phi4mm perplexity -m MODEL_DIR (-f FILE | -p TEXT | --ids LIST) [options]\n"
            "  perplexity of a text (as the tokenizer reads it: no chat template, no media) in sliding windows\n"
            "  -f, --prompt-file FILE  the text (- : standard input)\n"
            "  -p, --prompt TEXT     or the text itself\n"
            "  --ids LIST            or token ids, separated by commas or spaces\n"
            "  --ctx N               window length in tokens (default 512)\n"
            "  --stride S            a window every S tokens (default ctx/2; ctx: disjoint windows)\n"
            "  --max-windows K       stop after K windows (default: the whole text)\n"
            "  --batch B             windows decoded together (default 4; 1 with --compare, whose KL divergence\n"
            "                        keeps a step's scored rows: up to B x 512 rows of the vocabulary's floats)\n"
            "  --weights bf16|q8     weights to score with (default bf16)\n"
            "  --kv-cache f32|bf16   KV cache elements (default f32)\n"
            "  --compare WHAT        score again with one opt-in changed (q8: --weights q8, compute-bf16:\n"
            "                        --compute bf16, kv-bf16: --kv-cache bf16) and report how far it moves the model\n"
            "                        (PPL ratio, change of NLL, same top token, RMS change of p, KL divergence);\n"
            "                        both run in lockstep, loaded together\n"
            "  --compute f32|bf16    products of the prompt rows (default f32)\n"
            "  --json                one JSON object on stdout instead of the summary\n"
            "  --per-token           with --json: each scored token's position, id and log-probability\n"
            "  --quiet               no running perplexity on stderr\n");
}

/* One load's scores: per position of the text, the text token's log-probability and the most
 * likely token there (scored[p] = 1 where a window scored p). */
typedef struct ppl_scores {
    float *lp;
    int32_t *top;
    unsigned char *scored;
    float *kl; /* a variant's: KL(base || variant) at each position (NULL: a base) */
    double seconds;
} ppl_scores;

/* The base's log-probabilities of the rows a step scored, until the variant's step takes them:
 * pool rows, slot[p] the row of text position p (-1: none). */
typedef struct ppl_pool {
    float *rows;
    int *free_rows, n_free, cap;
    int *slot;
    int vocab;
    int overflow; /* a row found no room, or the variant scored a position the base had not */
} ppl_pool;

typedef struct ppl_window {
    ppl_scores *s;
    ppl_pool *pool; /* NULL: no KL; else the base fills it (s->kl NULL) and the variant drains it */
    int begin, first; /* the window's first position in the text; its first local position scored */
    int done, failed;
    char error[256];
} ppl_window;

static void on_logits(void *user, int pos, const float *x, int V) {
    ppl_window *w = user;
    ppl_pool *pl = w->pool;
    if (!pl || pos < w->first || pos < 1) return;
    int p = w->begin + pos;
    if (!w->s->kl) { /* the base: kept for the variant's step */
        if (!pl->n_free || pl->slot[p] >= 0 || V != pl->vocab) {
            pl->overflow = 1;
            return;
        }
        int r = pl->free_rows[--pl->n_free];
        pm_log_softmax(x, V, pl->rows + (size_t)r * V);
        pl->slot[p] = r;
    } else { /* the variant: against the base's row, which goes back */
        int r = pl->slot[p];
        if (r < 0 || V != pl->vocab) {
            pl->overflow = 1;
            return;
        }
        w->s->kl[p] = (float)pm_kl_divergence(pl->rows + (size_t)r * V, x, V);
        pl->slot[p] = -1;
        pl->free_rows[pl->n_free++] = r;
    }
}

static void on_plp(void *user, int pos, pm_logprob chosen, const pm_logprob *top, int n_top) {
    ppl_window *w = user;
    if (pos < w->first || pos < 1) return;
    int p = w->begin + pos;
    w->s->lp[p] = chosen.logprob;
    w->s->top[p] = n_top > 0 ? top[0].token : -1;
    w->s->scored[p] = 1;
}

static void on_done(void *user, pm_finish reason, int prompt_tokens, int completion_tokens, const char *error) {
    (void)prompt_tokens, (void)completion_tokens;
    ppl_window *w = user;
    w->done = 1;
    if (reason == PM_FINISH_ERROR || reason == PM_FINISH_CANCELLED) {
        w->failed = 1;
        snprintf(w->error, sizeof w->error, "%s", error ? error : "cancelled");
    }
}

typedef struct ppl_plan {
    const int32_t *ids;
    int n, ctx, stride, windows; /* windows: how many to run */
    int batch, quiet;
} ppl_plan;

/* What a pass loads and runs with. */
typedef struct ppl_setup {
    pm_load_options lo;
    int kv_bf16;
    const char *name;
} ppl_setup;

/* The window that starts at begin ends at min(begin + ctx, n); its tokens from the previous
 * window's end on are its own to score. */
static int plan_windows(ppl_plan *pl, long max_windows) {
    int w = 0;
    for (int begin = 0, end = 0; end < pl->n && (max_windows <= 0 || w < max_windows); begin += pl->stride, w++)
        end = begin + pl->ctx < pl->n ? begin + pl->ctx : pl->n;
    return pl->windows = w;
}

static double nll_mean(const ppl_scores *s, int n, double *se, long *count) {
    double sum = 0, sq = 0;
    long k = 0;
    for (int p = 0; p < n; p++)
        if (s->scored[p]) {
            sum += -s->lp[p];
            sq += (double)s->lp[p] * s->lp[p];
            k++;
        }
    double mean = k ? sum / k : NAN, var = k > 1 ? (sq - k * mean * mean) / (k - 1) : 0;
    *se = k > 1 && var > 0 ? sqrt(var / k) : 0;
    *count = k;
    return mean;
}

static int errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int errf(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Scores the windows with one setup (n_setups 1) or two in lockstep (the base's step, then the
 * variant's, each batch of windows; with the KL divergence through pool). ms[k], kv[k]: setup
 * k's model and KV cache elements; s[k] its scores. */
static int score_all(pm_model *const *ms, const int *kv_bf16, int n_setups, const ppl_plan *pl, int want_top, const char *label,
                     ppl_scores *s, char *err, size_t errlen) {
    ppl_window *win = calloc((size_t)pl->windows * (size_t)n_setups, sizeof *win);
    pm_engine *eng[2] = {NULL, NULL};
    ppl_pool pool = {0};
    int rc = win ? 0 : errf(err, errlen, "out of memory");
    for (int k = 0; k < n_setups && !rc; k++) {
        s[k].lp = calloc((size_t)pl->n, sizeof *s[k].lp);
        s[k].top = calloc((size_t)pl->n, sizeof *s[k].top);
        s[k].scored = calloc((size_t)pl->n, 1);
        if (k) s[k].kl = calloc((size_t)pl->n, sizeof *s[k].kl);
        if (!s[k].lp || !s[k].top || !s[k].scored || (k && !s[k].kl)) rc = errf(err, errlen, "out of memory");
        pm_engine_opts o;
        pm_engine_opts_default(&o);
        o.max_seqs = pl->batch;
        o.kv_bf16 = kv_bf16[k];
        if (!rc && pm_engine_new(&eng[k], ms[k], &o, err, errlen)) rc = -1;
        if (!rc && k == 1) { /* the pool: a step's scored rows of every window of a batch */
            pm_model_info mi;
            pm_model_get_info(ms[0], &mi);
            pool.vocab = mi.vocab;
            pool.cap = pl->batch * (o.prefill_chunk > 0 ? o.prefill_chunk : 512);
            pool.rows = malloc(sizeof(float) * (size_t)pool.cap * (size_t)pool.vocab);
            pool.free_rows = malloc(sizeof(int) * (size_t)pool.cap);
            pool.slot = malloc(sizeof(int) * (size_t)pl->n);
            if (!pool.rows || !pool.free_rows || !pool.slot)
                rc = errf(err, errlen, "out of memory for the KL divergence's rows (%d x %d floats: lower --batch)", pool.cap, pool.vocab);
            for (int r = 0; !rc && r < pool.cap; r++) pool.free_rows[r] = pool.cap - 1 - r;
            pool.n_free = pool.cap;
            for (int p = 0; !rc && p < pl->n; p++) pool.slot[p] = -1;
        }
    }
    double t0 = cli_now();
    int prev_end = 0;
    for (int w0 = 0; w0 < pl->windows && !rc; w0 += pl->batch) {
        int w1 = w0 + pl->batch < pl->windows ? w0 + pl->batch : pl->windows;
        for (int w = w0; w < w1 && !rc; w++) {
            int begin = w * pl->stride, end = begin + pl->ctx < pl->n ? begin + pl->ctx : pl->n;
            for (int k = 0; k < n_setups && !rc; k++) {
                ppl_window *pw = &win[(size_t)k * pl->windows + w];
                *pw = (ppl_window){.s = &s[k], .pool = n_setups > 1 ? &pool : NULL, .begin = begin, .first = prev_end - begin};
                pm_request req = {0};
                req.ids = pl->ids + begin;
                req.n_ids = (size_t)(end - begin);
                req.max_tokens = 0;
                req.prompt_logprobs = 1;
                req.prompt_logprobs_from = pw->first;
                req.top_logprobs = want_top;
                pm_callbacks cb = {.on_done = on_done, .user = pw, .on_prompt_logprobs = on_plp,
                                   .on_prompt_logits = n_setups > 1 ? on_logits : NULL};
                char why[512];
                if (pm_engine_submit(eng[k], &req, &cb, NULL, why, sizeof why))
                    rc = errf(err, errlen, "window %d (tokens %d..%d): %s", w + 1, begin, end - 1, why);
            }
            prev_end = end;
        }
        while (!rc && (pm_engine_live(eng[0]) > 0 || (n_setups > 1 && pm_engine_live(eng[1]) > 0)))
            for (int k = 0; k < n_setups && !rc; k++) {
                if (pm_engine_live(eng[k]) <= 0) continue;
                double t = cli_now();
                if (pm_engine_step(eng[k]) < 0) rc = errf(err, errlen, "engine step failed in windows %d..%d", w0 + 1, w1);
                s[k].seconds += cli_now() - t;
            }
        for (int k = 0; k < n_setups && !rc; k++)
            for (int w = w0; w < w1 && !rc; w++) {
                const ppl_window *pw = &win[(size_t)k * pl->windows + w];
                if (pw->failed || !pw->done) rc = errf(err, errlen, "window %d: %s", w + 1, pw->failed ? pw->error : "not finished");
            }
        if (!rc && pool.overflow) rc = errf(err, errlen, "the KL divergence's rows fell out of step in windows %d..%d", w0 + 1, w1);
        if (!rc && !pl->quiet) {
            double se;
            long k;
            double nll = nll_mean(&s[0], pl->n, &se, &k);
            fprintf(stderr, "\r[perplexity] %s: %d/%d windows, %ld tokens, ppl %.6g", label, w1, pl->windows, k, exp(nll));
        }
    }
    if (!pl->quiet) fprintf(stderr, "\n");
    if (n_setups == 1) s[0].seconds = cli_now() - t0;
    for (int k = 0; k < n_setups; k++) pm_engine_free(eng[k]);
    free(pool.rows);
    free(pool.free_rows);
    free(pool.slot);
    free(win);
    return rc;
}

static void scores_free(ppl_scores *s) {
    free(s->lp);
    free(s->top);
    free(s->scored);
    free(s->kl);
}

/* "1,2 3" -> ids; -1 with a message naming the bad entry. */
static int parse_ids(const char *cmd, const char *list, int32_t **ids, int *n) {
    size_t cap = strlen(list) / 2 + 1;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return cli_fail(cmd, "out of memory");
    int k = 0;
    for (const char *p = list; *p;) {
        if (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n') {
            p++;
            continue;
        }
        char *end;
        long t = strtol(p, &end, 10);
        if (end == p || t < 0 || t > 0x7fffffffL || (*end && !strchr(", \t\n", *end))) {
            free(v);
            return cli_fail(cmd, "--ids: '%.20s' at offset %zu is not a token id", p, (size_t)(p - list));
        }
        v[k++] = (int32_t)t;
        p = end;
    }
    *ids = v;
    *n = k;
    return 0;
}

/* How far the variant's scores q move from the base scores s, over the positions s scored. */
typedef struct ppl_diff {
    double delta_nll, delta_se; /* mean of the variant's NLL - the base's of the text token, its standard error */
    double max_abs, same_top, rms_dp;
    double kl_mean, kl_se, kl_median, kl_p99, kl_max; /* KL(base || variant) over the positions */
} ppl_diff;

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted v[0, k) (linear between neighbours). */
static double quantile(const float *v, long k, double q) {
    double at = q * (double)(k - 1);
    long i = (long)at;
    return i + 1 < k ? v[i] + (at - (double)i) * (v[i + 1] - v[i]) : v[k - 1];
}

static ppl_diff compare_scores(const ppl_scores *s, const ppl_scores *q, int n) {
    double d = 0, d2 = 0, dp2 = 0, maxd = 0, kl = 0, kl2 = 0;
    long k = 0, same = 0;
    float *kls = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int p = 0; p < n; p++) {
        if (!s->scored[p]) continue;
        double dl = (double)s->lp[p] - q->lp[p], dp = exp(q->lp[p]) - exp(s->lp[p]);
        d += dl, d2 += dl * dl, dp2 += dp * dp;
        if (fabs(dl) > maxd) maxd = fabs(dl);
        same += s->top[p] == q->top[p];
        if (kls) kls[k] = q->kl[p];
        kl += q->kl[p], kl2 += (double)q->kl[p] * q->kl[p];
        k++;
    }
    ppl_diff r = {0};
    if (k) {
        r.delta_nll = d / k;
        r.delta_se = k > 1 ? sqrt(fmax(0, (d2 - k * r.delta_nll * r.delta_nll) / (k - 1)) / k) : 0;
        r.max_abs = maxd;
        r.same_top = (double)same / k;
        r.rms_dp = sqrt(dp2 / k);
        r.kl_mean = kl / k;
        r.kl_se = k > 1 ? sqrt(fmax(0, (kl2 - k * r.kl_mean * r.kl_mean) / (k - 1)) / k) : 0;
    }
    if (k && kls) {
        qsort(kls, (size_t)k, sizeof *kls, cmp_float);
        r.kl_median = quantile(kls, k, 0.5);
        r.kl_p99 = quantile(kls, k, 0.99);
        r.kl_max = kls[k - 1];
    }
    free(kls);
    return r;
}

static void print_json(const ppl_plan *pl, const ppl_setup *base, const ppl_scores *s, int per_token, const ppl_setup *var, const ppl_scores *q) {
    double se;
    long k;
    double nll = nll_mean(s, pl->n, &se, &k);
    printf("{\"tokens\": %d, \"scored\": %ld, \"windows\": %d, \"ctx\": %d, \"stride\": %d, \"setup\": \"%s\", \"nll\": %.6f, \"nll_stderr\": %.6f, "
           "\"ppl\": %.9g, \"ppl_stderr\": %.9g, \"seconds\": %.3f",
           pl->n, k, pl->windows, pl->ctx, pl->stride, base->name, nll, se, exp(nll), exp(nll) * se, s->seconds);
    if (per_token) { /* [position, id, log-probability] (with --compare: and the variant's, and the KL divergence there) */
        printf(", \"token_logprobs\": [");
        for (int p = 0, c = 0; p < pl->n; p++)
            if (!s->scored[p]) continue;
            else if (q) printf("%s[%d, %d, %.6f, %.6f, %.6g]", c++ ? ", " : "", p, (int)pl->ids[p], s->lp[p], q->lp[p], q->kl[p]);
            else printf("%s[%d, %d, %.6f]", c++ ? ", " : "", p, (int)pl->ids[p], s->lp[p]);
        printf("]");
    }
    if (q) {
        double qse;
        long qk;
        double qnll = nll_mean(q, pl->n, &qse, &qk);
        ppl_diff df = compare_scores(s, q, pl->n);
        printf(", \"compare\": {\"setup\": \"%s\", \"nll\": %.6f, \"ppl\": %.9g, \"ppl_stderr\": %.9g, \"seconds\": %.3f, \"ppl_ratio\": %.6f, "
               "\"delta_nll\": %.6f, \"delta_nll_stderr\": %.6f, \"max_abs_delta_logprob\": %.6f, \"same_top\": %.6f, \"rms_delta_p\": %.6f, "
               "\"kl_mean\": %.6g, \"kl_stderr\": %.6g, \"kl_median\": %.6g, \"kl_p99\": %.6g, \"kl_max\": %.6g}",
               var->name, qnll, exp(qnll), exp(qnll) * qse, q->seconds, exp(qnll - nll), df.delta_nll, df.delta_se, df.max_abs, df.same_top,
               df.rms_dp, df.kl_mean, df.kl_se, df.kl_median, df.kl_p99, df.kl_max);
    }
    printf("}\n");
}

static void print_pass(const ppl_setup *su, const ppl_scores *s, int n) {
    double se;
    long k;
    double nll = nll_mean(s, n, &se, &k);
    printf("  %-18s PPL = %.6g +/- %.3g   (mean NLL %.5f nats; %.1f s, %.1f tokens/s)\n", su->name, exp(nll), exp(nll) * se, nll, s->seconds,
           s->seconds > 0 ? (double)k / s->seconds : 0);
}

static void print_summary(const ppl_plan *pl, const ppl_setup *base, const ppl_scores *s, const ppl_setup *var, const ppl_scores *q) {
    double se, qse;
    long k, qk;
    double nll = nll_mean(s, pl->n, &se, &k);
    printf("perplexity: %d tokens, %d windows of %d (stride %d), %ld tokens scored\n", pl->n, pl->windows, pl->ctx, pl->stride, k);
    print_pass(base, s, pl->n);
    if (!q) return;
    print_pass(var, q, pl->n);
    ppl_diff df = compare_scores(s, q, pl->n);
    printf("  %s against %s: PPL ratio %.5f, mean delta NLL %+.5f +/- %.5f nats (max |delta log-prob| %.4f), same top token %.2f%%, "
           "RMS delta p %.4f\n",
           var->name, base->name, exp(nll_mean(q, pl->n, &qse, &qk) - nll), df.delta_nll, df.delta_se, df.max_abs, 100.0 * df.same_top, df.rms_dp);
    printf("  KL divergence of %s from %s: mean %.6g +/- %.2g, median %.6g, 99%% %.6g, max %.6g nats\n", var->name, base->name, df.kl_mean,
           df.kl_se, df.kl_median, df.kl_p99, df.kl_max);
}

/* "bf16 weights, f32 products, f32 KV" style names for a setup. */
static const char *setup_name(const ppl_setup *su, char *buf, size_t len) {
    snprintf(buf, len, "%s%s%s", su->lo.weights == PM_WEIGHTS_Q8 ? "q8" : "bf16", su->lo.compute_bf16 ? "+compute-bf16" : "",
             su->kv_bf16 ? "+kv-bf16" : "");
    return buf;
}

int pm_cmd_perplexity(int argc, char **argv) {
    const char *cmd = "perplexity", *dir = NULL, *prompt = NULL, *prompt_file = NULL, *ids_list = NULL, *compare = NULL;
    long ctx = 512, stride = 0, max_windows = 0, batch = 0;
    int json = 0, per_token = 0, quiet = 0, rc = 0;
    ppl_setup base = {0}, var;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_perplexity();
            return 0;
        }
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--per-token")) per_token = 1;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!v) rc = cli_fail(cmd, "option %s needs a value", a);
        else {
            i++;
            if (!strcmp(a, "-m") || !strcmp(a, "--model")) dir = v;
            else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
            else if (!strcmp(a, "-f") || !strcmp(a, "--prompt-file")) prompt_file = v;
            else if (!strcmp(a, "--ids")) ids_list = v;
            else if (!strcmp(a, "--ctx")) { if (cli_int(v, 2, 1 << 20, &ctx)) rc = cli_fail(cmd, "--ctx must be 2..1048576, got '%s'", v); }
            else if (!strcmp(a, "--stride")) { if (cli_int(v, 1, 1 << 20, &stride)) rc = cli_fail(cmd, "--stride must be >= 1, got '%s'", v); }
            else if (!strcmp(a, "--max-windows")) { if (cli_int(v, 1, 1L << 30, &max_windows)) rc = cli_fail(cmd, "--max-windows must be >= 1, got '%s'", v); }
            else if (!strcmp(a, "--batch")) { if (cli_int(v, 1, 64, &batch)) rc = cli_fail(cmd, "--batch must be 1..64, got '%s'", v); }
            else if (!strcmp(a, "--weights")) rc = cli_weights(cmd, v, &base.lo);
            else if (!strcmp(a, "--compute")) rc = cli_compute(cmd, v, &base.lo.compute_bf16);
            else if (!strcmp(a, "--kv-cache")) rc = cli_kv_cache(cmd, v, &base.kv_bf16);
            else if (!strcmp(a, "--compare")) compare = v;
            else rc = cli_fail(cmd, "unknown option '%s' (see --help)", a);
        }
    }
    if (rc) return rc;
    if (!dir) return cli_fail(cmd, "missing -m MODEL_DIR");
    if (!stride) stride = ctx / 2 > 0 ? ctx / 2 : 1;
    if (!batch) batch = compare ? 1 : 4;
    if (stride > ctx) return cli_fail(cmd, "--stride (%ld) must not exceed --ctx (%ld): tokens between windows would go unscored", stride, ctx);
    if (per_token && !json) return cli_fail(cmd, "--per-token needs --json");
    if (ids_list && (prompt || prompt_file)) return cli_fail(cmd, "give the text (-p / -f) or --ids, not both");
    var = base;
    if (compare) {
        int *flag = !strcmp(compare, "compute-bf16") ? &var.lo.compute_bf16 : !strcmp(compare, "kv-bf16") ? &var.kv_bf16 : NULL;
        if (!strcmp(compare, "q8")) {
            if (base.lo.weights == PM_WEIGHTS_Q8) return cli_fail(cmd, "--compare q8 scores bf16 weights against q8: leave out --weights q8");
            var.lo.weights = PM_WEIGHTS_Q8;
        } else if (!flag) return cli_fail(cmd, "--compare must be q8, compute-bf16 or kv-bf16, got '%s'", compare);
        else if (*flag) return cli_fail(cmd, "--compare %s: the first pass has it already (leave out its option)", compare);
        else *flag = 1;
    }
    char base_name[64], var_name[64];
    base.name = setup_name(&base, base_name, sizeof base_name);
    var.name = setup_name(&var, var_name, sizeof var_name);
    char *file_text = NULL, err[1024];
    int32_t *ids = NULL;
    int n = 0;
    if (ids_list) rc = parse_ids(cmd, ids_list, &ids, &n);
    else rc = cli_prompt_arg(cmd, prompt, prompt_file, &prompt, &file_text);
    pm_model *m = NULL;
    if (!rc && pm_model_load_opts(&m, dir, &base.lo, err, sizeof err)) rc = cli_fail(cmd, "%s", err);
    if (!rc) cli_compute_note(cmd, &base.lo, m);
    if (!rc && !ids_list) { /* the tokenizer's own ids: the text may be longer than the context, and hold placeholders' text */
        size_t nn = 0;
        if (pm_model_tokenize(m, prompt, strlen(prompt), &ids, &nn, err, sizeof err)) rc = cli_fail(cmd, "the text: %s", err);
        else if (nn > 0x7fffffff) rc = cli_fail(cmd, "the text has %zu tokens: too many", nn);
        n = (int)nn;
    }
    free(file_text);
    if (!rc && ids_list) { /* named by its place in the list, not in a window */
        pm_model_info mi;
        pm_model_get_info(m, &mi);
        for (int p = 0; p < n && !rc; p++)
            if (ids[p] >= mi.vocab) rc = cli_fail(cmd, "--ids: token %d at index %d is outside the vocabulary [0, %d)", (int)ids[p], p, mi.vocab);
    }
    if (!rc && n < 2) rc = cli_fail(cmd, "the text has %d token%s: perplexity needs at least 2", n, n == 1 ? "" : "s");
    ppl_plan pl = {.ids = ids, .n = n, .ctx = (int)ctx, .stride = (int)stride, .batch = (int)batch, .quiet = quiet};
    ppl_scores sc[2] = {{0}, {0}};
    pm_model *ms[2] = {m, m};
    int kv[2] = {base.kv_bf16, var.kv_bf16};
    if (!rc && compare && memcmp(&var.lo, &base.lo, sizeof base.lo)) { /* a second load beside the first; a KV change shares it */
        if (pm_model_load_opts(&ms[1], dir, &var.lo, err, sizeof err)) rc = cli_fail(cmd, "%s", err);
        else cli_compute_note(cmd, &var.lo, ms[1]);
    }
    if (!rc) {
        plan_windows(&pl, max_windows);
        char label[160];
        snprintf(label, sizeof label, "%s%s%s", base.name, compare ? " and " : "", compare ? var.name : "");
        if (score_all(ms, kv, compare ? 2 : 1, &pl, compare != NULL, label, sc, err, sizeof err)) rc = cli_fail(cmd, "%s", err);
    }
    if (ms[1] != m) pm_model_free(ms[1]);
    pm_model_free(m);
    if (!rc && json) print_json(&pl, &base, &sc[0], per_token, compare ? &var : NULL, compare ? &sc[1] : NULL);
    else if (!rc) print_summary(&pl, &base, &sc[0], compare ? &var : NULL, compare ? &sc[1] : NULL);
    scores_free(&sc[0]);
    scores_free(&sc[1]);
    free(ids);
    return rc;
}
