/* cmd_generate.c — `phi4mm generate`: one request from the command line, streamed to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_media.h"
#include "cli_util.h"
#include "commands.h"

enum { CLI_MAX_STOP = 64 };

typedef struct done_info {
    pm_finish why;
    int prompt, completion;
    char error[512];
    const pm_model *m; /* for the tokens' bytes under --logprobs */
    int pred_drafted, pred_accepted; /* --prediction's tokens drafted and taken (-1: none given) */
    const char *prefill;             /* --prefill: printed before the first token's text (then NULL) */
} done_info;

static int print_token(void *user, int32_t token, const char *text, size_t len) {
    done_info *d = user;
    (void)token;
    if (d->prefill) {
        fputs(d->prefill, stdout);
        d->prefill = NULL;
    }
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* A token's bytes, quoted, with control bytes and non-ASCII escaped (\xNN): one line each. */
static void put_token(const pm_model *m, int32_t id) {
    size_t len = 0;
    const unsigned char *b = (const unsigned char *)pm_model_token_bytes(m, id, &len);
    fputc('"', stderr);
    for (size_t i = 0; i < len; i++) {
        if (b[i] == '"' || b[i] == '\\') fprintf(stderr, "\\%c", b[i]);
        else if (b[i] >= 0x20 && b[i] < 0x7f) fputc(b[i], stderr);
        else fprintf(stderr, "\\x%02x", b[i]);
    }
    fputc('"', stderr);
}

/* --logprobs: one line on stderr a generated token: its log-probability, the token, the top ones. */
static void print_logprobs(void *user, pm_logprob chosen, const pm_logprob *top, int n_top) {
    const done_info *d = user;
    fprintf(stderr, "logprob %9.5f ", chosen.logprob);
    put_token(d->m, chosen.token);
    for (int k = 0; k < n_top; k++) {
        fprintf(stderr, k ? ", " : "  top: ");
        put_token(d->m, top[k].token);
        fprintf(stderr, " %.5f", top[k].logprob);
    }
    fputc('\n', stderr);
}

/* --score: one line on stderr a prompt position, as --logprobs (position 0 has no score). */
static void print_prompt_logprobs(void *user, int pos, pm_logprob chosen, const pm_logprob *top, int n_top) {
    fprintf(stderr, "prompt %5d ", pos);
    if (pos == 0) {
        fprintf(stderr, "logprob %9s ", "-");
        put_token(((const done_info *)user)->m, chosen.token);
        fputc('\n', stderr);
    } else {
        print_logprobs(user, chosen, top, n_top);
    }
}

static void on_prediction(void *user, int drafted, int accepted) {
    done_info *d = user;
    d->pred_drafted = drafted;
    d->pred_accepted = accepted;
}

static void on_done(void *user, pm_finish why, int prompt, int completion, const char *error) {
    done_info *d = user;
    d->why = why;
    d->prompt = prompt;
    d->completion = completion;
    if (error) snprintf(d->error, sizeof d->error, "%s", error);
}

static void usage_generate(void) {
    fprintf(stderr,
            "usage: phi4mm generate -m MODEL_DIR -p PROMPT [options]\n"
            "  -p, --prompt TEXT     user message (wrapped in the chat template); may hold <|image_N|>/<|audio_N|>\n"
            "  -f, --prompt-file FILE\n"
            "                        ... read from FILE (- : standard input), its final line endings dropped\n"
            "  --system TEXT         system message\n"
            "  --raw                 use PROMPT as the full model input (no chat template)\n"
            "  --prefill TEXT        the answer begins with TEXT (printed first), the model goes on with it\n"
            "  --audio FILE          audio clip (WAV/FLAC/OGG/MP3/M4A/MP4/WebM), repeatable, in placeholder order\n"
            "  --image FILE          image (PNG/JPEG/WebP/GIF), repeatable, in placeholder order (one FILE may\n"
            "                        be -, standard input)\n"
            "  --max-crops N         at most N HD crops per image (1..4096; default: the checkpoint's\n"
            "                        dynamic_hd, 36): fewer image tokens, a faster and coarser look\n"
            "  -n, --max-tokens N    tokens to generate (default 256)\n"
            "  --temp T              temperature (default 0 = greedy); --top-k K; --top-p P; --min-p P;\n"
            "                        --seed S\n"
            "  --frequency-penalty F, --presence-penalty F\n"
            "                        OpenAI's penalties (-2..2) on tokens already generated (default 0)\n"
            "  --repetition-penalty R\n"
            "                        Hugging Face's (> 1 discourages) on the prompt's and output's tokens\n"
            "  --logit-bias ID=B     add B (-100..100) to token ID's logit; repeatable\n"
            "  --min-tokens N        ban the end tokens until N tokens have come; --ignore-eos: always\n"
            "  --stop TEXT           end the answer before TEXT (repeatable); --stop-id ID: when token ID\n"
            "                        comes (repeatable); --include-stop: keep what ended it in the text\n"
            "  --keep-special        print special tokens' text (<|tool_call|>, ...) instead of dropping it\n"
            "  --allow-id ID         only the --allow-id tokens may come (repeatable)\n"
            "  --bad-word WORD       the answer never writes WORD (repeatable; at its start or after a space)\n"
            );
    fprintf(stderr,
            "  --json                JSON mode: the answer is held to one JSON object\n"
            "  --json-schema FILE    ... to a value of the JSON Schema in FILE (keywords: README)\n"
            "  --regex RE            guided decoding: the whole answer matches the regular expression RE\n"
            "                        (syntax: README)\n"
            "  --choice TEXT         ... is one of the --choice texts (repeatable)\n"
            "  --grammar FILE        ... is a root (Lark: a start) of the GBNF or Lark grammar in FILE (README)\n"
            "  --prediction FILE     text the answer should repeat much of (an edit's original): drafted\n"
            "                        from while the answer follows it, the same tokens in fewer steps\n"
            "  --max-audio-seconds S cap on the request's total audio duration (default 1800)\n"
            "  --max-audio-clips N   cap on the number of clips (default 16)\n"
            "  --weights bf16|q8     decoder weights: the checkpoint's bf16 (default) or int8 made at load\n"
            "  --mlock               lock the checkpoint in memory (needs ulimit -l above its size)\n"
            "  --recache             first re-read the checkpoint into 2 MB pages of the page cache (README)\n"
            "  --kv-budget SIZE      KV cache the request may use, e.g. 4G (default auto: memory less the\n"
            "                        weights and a headroom; none: no limit)\n"
            "  --kv-cache f32|bf16   KV cache elements (default f32; bf16: half the memory, K/V rounded)\n"
            "  --compute f32|bf16    products of many rows (prompt, encoders): fp32 (default) or inputs\n"
            "                        rounded to bf16, bf16 pairs multiplied (AVX512-BF16: up to 2 x faster)\n"
            "  --draft N             check up to N tokens (0-15) drafted from the prompt and the answer\n"
            "                        (their last words seen before) in each decode step: the same tokens,\n"
            "                        fewer passes over the weights where the text repeats (default 0)\n"
            "  --logprobs K          print each generated token's log-probability and the K (0-20) most\n"
            "                        likely tokens' to stderr, a line each (the model's, before sampling)\n"
            "  --score               print every prompt token's log-probability under the tokens before it\n"
            "                        (and the --logprobs K most likely there) to stderr first; -n 0: only that\n"
            "  --stats               print prompt/completion tokens and timings to stderr\n");
}

/* Runs one request and streams it; returns the exit status. */
static int run_request(const char *cmd, pm_model *m, pm_request *req, const pm_engine_opts *opts, int stats, const char *prefill) {
    done_info d = {PM_FINISH_ERROR, 0, 0, "", m, -1, -1, prefill};
    pm_callbacks cb = {.on_token = print_token, .on_done = on_done, .user = &d, .on_logprobs = print_logprobs,
                       .on_prompt_logprobs = print_prompt_logprobs, .on_prediction = on_prediction};
    char err[1024];
    double t0 = cli_now();
    int rc = pm_generate(m, req, opts, &cb, err, sizeof err);
    fputc('\n', stdout);
    fflush(stdout);
    if (rc) return cli_fail(cmd, "%s", err);
    if (d.why == PM_FINISH_ERROR) return cli_fail(cmd, "%s", d.error);
    if (stats)
        fprintf(stderr, "phi4mm: %d prompt tokens, %d completion tokens, %.2f s, finish=%s\n", d.prompt, d.completion, cli_now() - t0,
                d.why == PM_FINISH_STOP ? "stop" : d.why == PM_FINISH_LENGTH ? "length" : "cancelled");
    if (stats && d.pred_drafted >= 0)
        fprintf(stderr, "phi4mm: prediction: %d tokens drafted, %d taken\n", d.pred_drafted, d.pred_accepted);
    return 0;
}

/* "ID=B" of --logit-bias into bias[*n]. */
static int parse_bias(const char *cmd, const char *v, pm_logit_bias *bias, int *n) {
    char id[32];
    const char *eq = strchr(v, '=');
    long t;
    double b;
    if (*n >= PM_MAX_LOGIT_BIAS) return cli_fail(cmd, "too many --logit-bias (max %d)", PM_MAX_LOGIT_BIAS);
    if (!eq || eq == v || (size_t)(eq - v) >= sizeof id) return cli_fail(cmd, "--logit-bias takes ID=BIAS, got '%s'", v);
    memcpy(id, v, (size_t)(eq - v));
    id[eq - v] = 0;
    if (cli_int(id, 0, 0x7fffffffL, &t)) return cli_fail(cmd, "--logit-bias: '%s' is not a token id", id);
    if (cli_float(eq + 1, -100, 100, &b)) return cli_fail(cmd, "--logit-bias: the bias must be in [-100, 100], got '%s'", eq + 1);
    bias[*n].token = (int32_t)t;
    bias[(*n)++].bias = (float)b;
    return 0;
}

/* An option whose value names a text file (--json-schema, --grammar, --prediction): its bytes into
 * *dst (the option's earlier value freed), text without NUL; cli_fail's status otherwise. */
static int text_file_opt(const char *cmd, const char *opt, const char *path, char **dst) {
    size_t len;
    char err[1024];
    free(*dst);
    if (!(*dst = cli_read_file(path, &len, err, sizeof err))) return cli_fail(cmd, "%s", err);
    if (strlen(*dst) != len) return cli_fail(cmd, "%s %s holds a NUL byte: not text", opt, path);
    return 0;
}

int pm_cmd_generate(int argc, char **argv) {
    const char *cmd = "generate", *dir = NULL, *prompt = NULL, *system = NULL, *prompt_file = NULL;
    char *prompt_text = NULL; /* --prompt-file's */
    int raw = 0, stats = 0, score = 0, json = 0, ignore_eos = 0, include_stop = 0, keep_special = 0;
    const char *prefill = NULL, *stops[CLI_MAX_STOP];
    int32_t stop_ids[CLI_MAX_STOP], *allowed = NULL;
    const char *bad_words[PM_MAX_BAD_WORDS];
    int n_stops = 0, n_stop_ids = 0, n_allowed = 0, n_bad_words = 0;
    long min_tokens = 0, max_crops = 0;
    char *schema = NULL, *prediction = NULL, *grammar = NULL; /* --json-schema's, --prediction's and --grammar's text */
    long n = 256;
    double temp = 0, top_p = 1.0, min_p = 0, freq = 0, pres = 0, rep = 0;
    const char *regex = NULL, *choices[PM_MAX_CHOICES];
    int n_choices = 0;
    long top_k = 0, seed = 0, logprobs = -1;
    pm_logit_bias bias[PM_MAX_LOGIT_BIAS];
    int n_bias = 0;
    cli_media ms = {0};
    int rc = 0, n_audio_paths = 0;
    const char *audio_paths[CLI_MAX_MEDIA];
    pm_engine_opts opts;
    pm_engine_opts_default(&opts);
    pm_load_options lo = {0};
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = strcmp(a, "--raw") && strcmp(a, "--stats") && strcmp(a, "--score") && strcmp(a, "--json") && strcmp(a, "--ignore-eos") && strcmp(a, "--include-stop") && strcmp(a, "--keep-special") && strcmp(a, "--mlock") && strcmp(a, "--recache") && strcmp(a, "-h") && strcmp(a, "--help");
        if (takes && !v) {
            rc = cli_fail(cmd, "option %s needs a value", a);
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_generate();
            cli_media_free(&ms);
            free(schema);
            free(prediction);
            free(grammar);
            free(allowed);
            free(prompt_text);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) dir = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--prompt-file")) prompt_file = v;
        else if (!strcmp(a, "--system")) system = v;
        else if (!strcmp(a, "--raw")) { raw = 1; continue; }
        else if (!strcmp(a, "--stats")) { stats = 1; continue; }
        else if (!strcmp(a, "--score")) { score = 1; continue; }
        else if (!strcmp(a, "--json")) { json = 1; continue; }
        else if (!strcmp(a, "--ignore-eos")) { ignore_eos = 1; continue; }
        else if (!strcmp(a, "--include-stop")) { include_stop = 1; continue; }
        else if (!strcmp(a, "--keep-special")) { keep_special = 1; continue; }
        else if (!strcmp(a, "--prefill")) prefill = v;
        else if (!strcmp(a, "--stop")) {
            if (n_stops == CLI_MAX_STOP) rc = cli_fail(cmd, "too many --stop texts (max %d)", CLI_MAX_STOP);
            else if (!v[0]) rc = cli_fail(cmd, "--stop needs a non-empty text");
            else stops[n_stops++] = v;
        }
        else if (!strcmp(a, "--allow-id")) {
            long id;
            int32_t *p = n_allowed < PM_MAX_ALLOWED_IDS ? realloc(allowed, sizeof *allowed * (size_t)(n_allowed + 1)) : NULL;
            if (!p) rc = cli_fail(cmd, "too many --allow-id tokens (max %d)", PM_MAX_ALLOWED_IDS);
            else if (allowed = p, cli_int(v, 0, 0x7fffffffL, &id)) rc = cli_fail(cmd, "--allow-id must be a token id, got '%s'", v);
            else allowed[n_allowed++] = (int32_t)id;
        }
        else if (!strcmp(a, "--bad-word")) {
            if (n_bad_words == PM_MAX_BAD_WORDS) rc = cli_fail(cmd, "too many --bad-word words (max %d)", PM_MAX_BAD_WORDS);
            else bad_words[n_bad_words++] = v;
        }
        else if (!strcmp(a, "--stop-id")) {
            long id;
            if (n_stop_ids == CLI_MAX_STOP) rc = cli_fail(cmd, "too many --stop-id tokens (max %d)", CLI_MAX_STOP);
            else if (cli_int(v, 0, 0x7fffffffL, &id)) rc = cli_fail(cmd, "--stop-id must be a token id, got '%s'", v);
            else stop_ids[n_stop_ids++] = (int32_t)id;
        }
        else if (!strcmp(a, "--min-tokens")) { if (cli_int(v, 0, 1 << 20, &min_tokens)) rc = cli_fail(cmd, "--min-tokens must be a non-negative integer, got '%s'", v); }
        else if (!strcmp(a, "--json-schema")) rc = text_file_opt(cmd, a, v, &schema);
        else if (!strcmp(a, "--grammar")) rc = text_file_opt(cmd, a, v, &grammar);
        else if (!strcmp(a, "--prediction")) rc = text_file_opt(cmd, a, v, &prediction);
        else if (!strcmp(a, "--mlock")) { lo.mlock = 1; continue; }
        else if (!strcmp(a, "--recache")) { lo.recache = 1; continue; }
        else if (!strcmp(a, "--audio")) {
            if (n_audio_paths >= CLI_MAX_MEDIA) rc = cli_fail(cmd, "too many --audio files (max %d)", CLI_MAX_MEDIA);
            else audio_paths[n_audio_paths++] = v; /* decoded once every option (the limit) is known */
        }
        else if (!strcmp(a, "--image")) rc = cli_load_image(cmd, &ms, v);
        else if (!strcmp(a, "--max-crops")) { if (cli_int(v, 1, 4096, &max_crops)) rc = cli_fail(cmd, "--max-crops must be 1..4096, got '%s'", v); }
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) { if (cli_int(v, 0, 1 << 20, &n)) rc = cli_fail(cmd, "-n must be a non-negative integer, got '%s'", v); }
        else if (!strcmp(a, "--temp")) { if (cli_float(v, 0, 100, &temp)) rc = cli_fail(cmd, "--temp must be a number in [0, 100], got '%s'", v); }
        else if (!strcmp(a, "--top-p")) { if (cli_float(v, 0, 1, &top_p)) rc = cli_fail(cmd, "--top-p must be in [0, 1], got '%s'", v); }
        else if (!strcmp(a, "--min-p")) { if (cli_float(v, 0, 1, &min_p)) rc = cli_fail(cmd, "--min-p must be in [0, 1], got '%s'", v); }
        else if (!strcmp(a, "--regex")) regex = v;
        else if (!strcmp(a, "--choice")) {
            if (n_choices == PM_MAX_CHOICES) rc = cli_fail(cmd, "too many --choice texts (max %d)", PM_MAX_CHOICES);
            else choices[n_choices++] = v;
        }
        else if (!strcmp(a, "--frequency-penalty")) { if (cli_float(v, -2, 2, &freq)) rc = cli_fail(cmd, "--frequency-penalty must be in [-2, 2], got '%s'", v); }
        else if (!strcmp(a, "--presence-penalty")) { if (cli_float(v, -2, 2, &pres)) rc = cli_fail(cmd, "--presence-penalty must be in [-2, 2], got '%s'", v); }
        else if (!strcmp(a, "--repetition-penalty")) { if (cli_float(v, 0, 100, &rep) || rep == 0) rc = cli_fail(cmd, "--repetition-penalty must be in (0, 100], got '%s'", v); }
        else if (!strcmp(a, "--logit-bias")) rc = parse_bias(cmd, v, bias, &n_bias);
        else if (!strcmp(a, "--top-k")) { if (cli_int(v, 0, 1 << 30, &top_k)) rc = cli_fail(cmd, "--top-k must be >= 0, got '%s'", v); }
        else if (!strcmp(a, "--max-audio-seconds")) { if (cli_float(v, 0, 1e7, &opts.limits.max_audio_seconds)) rc = cli_fail(cmd, "--max-audio-seconds must be a non-negative number, got '%s'", v); }
        else if (!strcmp(a, "--max-audio-clips")) { long k; if (cli_int(v, 0, 4096, &k)) rc = cli_fail(cmd, "--max-audio-clips must be in [0, 4096], got '%s'", v); else opts.limits.max_audio_clips = (int)k; }
        else if (!strcmp(a, "--weights")) rc = cli_weights(cmd, v, &lo);
        else if (!strcmp(a, "--kv-budget")) rc = cli_kv_budget(cmd, v, &opts.kv_budget);
        else if (!strcmp(a, "--kv-cache")) rc = cli_kv_cache(cmd, v, &opts.kv_bf16);
        else if (!strcmp(a, "--compute")) rc = cli_compute(cmd, v, &lo.compute_bf16);
        else if (!strcmp(a, "--draft")) rc = cli_draft(cmd, v, &opts.draft_tokens);
        else if (!strcmp(a, "--seed")) { if (cli_int(v, 0, 0x7fffffffL, &seed)) rc = cli_fail(cmd, "--seed must be a non-negative integer, got '%s'", v); }
        else if (!strcmp(a, "--logprobs")) { if (cli_int(v, 0, PM_MAX_TOP_LOGPROBS, &logprobs)) rc = cli_fail(cmd, "--logprobs must be in [0, %d], got '%s'", PM_MAX_TOP_LOGPROBS, v); }
        else rc = cli_fail(cmd, "unknown option '%s' (see --help)", a);
        i++;
    }
    if (!rc && !dir) rc = cli_fail(cmd, "missing -m MODEL_DIR");
    if (!rc) rc = cli_prompt_arg(cmd, prompt, prompt_file, &prompt, &prompt_text);
    if (!rc) rc = cli_utf8_text(cmd, "--system", system) || cli_utf8_text(cmd, "--prefill", prefill);
    for (int k = 0; k < n_stops && !rc; k++) rc = cli_utf8_text(cmd, "a --stop text", stops[k]);
    if (!rc && n == 0 && !score) rc = cli_fail(cmd, "-n 0 generates nothing: only with --score");
    if (!rc && (!!regex + !!n_choices + !!schema + json + !!grammar) > 1)
        rc = cli_fail(cmd, "--json, --json-schema, --regex, --choice and --grammar exclude each other");
    if (!rc && prefill && raw) rc = cli_fail(cmd, "--prefill goes after the chat template: with --raw, end PROMPT with it");
    if (!rc && prefill && (regex || n_choices || schema || json || grammar))
        rc = cli_fail(cmd, "--prefill cannot be combined with --json, --json-schema, --regex, --choice or --grammar: the held answer would begin after it");
    for (int i = 0; i < n_audio_paths && !rc; i++) rc = cli_load_audio(cmd, &ms, audio_paths[i], opts.limits.max_audio_seconds);
    char *user = rc ? NULL : cli_media_prompt(&ms, prompt);
    if (!rc && !user) rc = cli_fail(cmd, "out of memory");
    if (rc) {
        cli_media_free(&ms);
        free(schema);
        free(prediction);
        free(grammar);
        free(allowed);
        free(prompt_text);
        return rc;
    }
    free(prompt_text);
    char *full = raw ? strdup(user) : pm_chat_prompt(system, user);
    free(user);
    if (full && prefill) { /* the assistant turn left open at the prefill: the model continues it */
        char *with = malloc(strlen(full) + strlen(prefill) + 1);
        if (with) strcat(strcpy(with, full), prefill);
        free(full);
        full = with;
    }
    if (!full) {
        cli_media_free(&ms);
        free(schema);
        free(prediction);
        free(grammar);
        free(allowed);
        return cli_fail(cmd, "out of memory");
    }
    char err[1024];
    pm_model *m = NULL;
    if (pm_model_load_opts(&m, dir, &lo, err, sizeof err)) {
        free(full);
        cli_media_free(&ms);
        free(schema);
        free(prediction);
        free(grammar);
        free(allowed);
        return cli_fail(cmd, "%s", err);
    }
    cli_compute_note(cmd, &lo, m);
    if (stats && lo.recache) {
        pm_model_info info;
        pm_model_get_info(m, &info);
        fprintf(stderr, "phi4mm: re-read %.2f GB of checkpoint, %.2f GB of it in 2 MB pages\n", info.recache_bytes / 1e9, info.recache_huge_bytes / 1e9);
    }
    pm_request req = {0};
    req.prompt = full;
    cli_media_attach(&ms, &req);
    req.max_tokens = (int)n;
    req.sampling.temperature = (float)temp;
    req.sampling.top_k = (int)top_k;
    req.sampling.top_p = (float)top_p;
    req.sampling.min_p = (float)min_p;
    req.sampling.seed = (uint64_t)seed;
    req.sampling.frequency_penalty = (float)freq;
    req.sampling.presence_penalty = (float)pres;
    req.sampling.repetition_penalty = (float)rep;
    req.format = schema      ? PM_FORMAT_JSON_SCHEMA
                 : json      ? PM_FORMAT_JSON_OBJECT
                 : regex     ? PM_FORMAT_REGEX
                 : n_choices ? PM_FORMAT_CHOICE
                 : grammar   ? PM_FORMAT_GRAMMAR
                             : PM_FORMAT_TEXT;
    req.grammar = grammar;
    req.json_schema = schema;
    req.regex = regex;
    req.choices = choices;
    req.n_choices = n_choices;
    req.min_tokens = (int)min_tokens;
    req.max_crops = (int)max_crops;
    req.prediction = prediction;
    req.ignore_eos = ignore_eos;
    req.logit_bias = bias;
    req.n_logit_bias = n_bias;
    req.logprobs = logprobs >= 0;
    req.top_logprobs = logprobs > 0 ? (int)logprobs : 0;
    req.prompt_logprobs = score;
    req.stop = stops;
    req.n_stop = n_stops;
    req.stop_ids = stop_ids;
    req.n_stop_ids = n_stop_ids;
    req.stop_in_output = include_stop;
    req.keep_special = keep_special;
    req.allowed_ids = allowed;
    req.n_allowed_ids = n_allowed;
    req.bad_words = bad_words;
    req.n_bad_words = n_bad_words;
    rc = run_request(cmd, m, &req, &opts, stats, prefill);
    pm_model_free(m);
    free(full);
    cli_media_free(&ms);
    free(schema);
    free(prediction);
    free(grammar);
    free(allowed);
    return rc;
}
