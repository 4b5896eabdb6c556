/* cmd_transcribe.c — `phi4mm transcribe`: speech recognition (or speech translation) of audio
 * files with the official instruction, up to --parallel files decoded together by one engine
 * (continuous batching: a file's tokens are those it gets alone, and a batch step streams the
 * weights once for all of them). Each file's text comes out in the order the files were given, as
 * soon as it and the ones before it are done; one file alone streams its tokens as they come. A
 * file that fails (unreadable, too long, ...) is named on stderr and the others go on; the exit
 * status is 1 if any failed. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"

enum { T_WAITING = 0, T_LOADED, T_RUNNING, T_DONE, T_FAILED };

typedef struct file_job {
    const char *path;
    pm_audio_in audio;  /* decoded, until its request ends */
    int decoded;
    char *text;         /* what it generated (not when streamed) */
    size_t len, cap;
    int state, stream;
    pm_finish why;
    char error[1024];
    int *running;       /* the files in the engine */
} file_job;

static void release(file_job *f) {
    if (f->decoded) pm_audio_in_free(&f->audio);
    f->decoded = 0;
}

/* Reads and decodes the file (at most max_seconds of it); 0, or -1 with f->error set. */
static int decode(file_job *f, double max_seconds) {
    size_t len;
    void *buf = cli_read_file(f->path, &len, f->error, sizeof f->error);
    if (!buf) return -1;
    int rc = pm_audio_decode_max(buf, len, f->path, max_seconds, &f->audio, f->error, sizeof f->error);
    free(buf);
    f->decoded = rc == 0;
    return rc ? -1 : 0;
}

static int on_text(void *user, int32_t token, const char *text, size_t len) {
    file_job *f = user;
    (void)token;
    if (f->stream) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        return 0;
    }
    if (f->len + len + 1 > f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 256;
        while (cap < f->len + len + 1) cap *= 2;
        char *t = realloc(f->text, cap);
        if (!t) return 1; /* cancels: the file fails for want of memory */
        f->text = t;
        f->cap = cap;
    }
    memcpy(f->text + f->len, text, len);
    f->len += len;
    f->text[f->len] = 0;
    return 0;
}

static void on_end(void *user, pm_finish why, int prompt, int completion, const char *error) {
    file_job *f = user;
    (void)prompt;
    (void)completion;
    f->why = why;
    f->state = why == PM_FINISH_STOP || why == PM_FINISH_LENGTH ? T_DONE : T_FAILED;
    if (f->state == T_FAILED) snprintf(f->error, sizeof f->error, "%.200s: %.800s", f->path, error ? error : "cancelled (out of memory for its text)");
    (*f->running)--;
    release(f);
}

/* Prints a finished file: its text (jsonl: one JSON object a line), or its error on stderr. */
static void put_file(const file_job *f, int nfiles, int jsonl) {
    if (jsonl) {
        json_t *o = json_pack("{s:s}", "file", f->path);
        if (f->state == T_DONE) {
            json_object_set_new(o, "text", json_stringn(f->text ? f->text : "", f->len));
            json_object_set_new(o, "finish", json_string(f->why == PM_FINISH_STOP ? "stop" : "length"));
        } else {
            json_object_set_new(o, "error", json_string(f->error));
        }
        char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (s) puts(s);
        free(s);
        json_decref(o);
    } else if (f->state == T_DONE && !f->stream) {
        if (nfiles > 1) printf("%s: ", f->path);
        fwrite(f->text ? f->text : "", 1, f->len, stdout);
        fputc('\n', stdout);
    } else if (f->state == T_DONE) {
        fputc('\n', stdout); /* after its streamed tokens */
    }
    if (f->state == T_FAILED) cli_fail("transcribe", "%s", f->error);
    fflush(stdout);
}

static void usage_transcribe(void) {
    fprintf(stderr,
            "usage: phi4mm transcribe -m MODEL_DIR [options] FILE...\n"
            "  speech recognition with the official instruction, a line per file (FILE: text when there\n"
            "  are several), in the order given\n"
            "  -n, --max-tokens N    tokens per file at most (default 512)\n"
            "  --translate LANGUAGE  translate the speech to LANGUAGE instead (\"Translate the audio to ...\")\n"
            "  --parallel N          files decoded together, 1-64 (default 8): one pass over the weights\n"
            "                        a step for all of them; each file's text is the one it gets alone\n"
            "  --jsonl               a JSON object a line: {\"file\", \"text\", \"finish\"} or {\"file\", \"error\"}\n"
            "  --max-audio-seconds S a file's limit (default 1800)\n"
            "  --weights bf16|q8, --mlock, --recache, --kv-cache f32|bf16, --compute f32|bf16, --kv-budget SIZE\n"
            "                        as for generate\n"
            "a file that cannot be transcribed is named on stderr, the others go on; exit status 1 if any failed\n");
}

int pm_cmd_transcribe(int argc, char **argv) {
    const char *cmd = "transcribe", *dir = NULL, *language = NULL;
    long n = 512, parallel = 8;
    double max_seconds = 0;
    int rc = 0, jsonl = 0, nfiles = 0;
    const char **files = calloc((size_t)argc, sizeof *files);
    pm_load_options lo = {0};
    pm_engine_opts opts;
    pm_engine_opts_default(&opts);
    pm_limits lim;
    pm_limits_default(&lim);
    max_seconds = lim.max_audio_seconds;
    if (!files) return cli_fail(cmd, "out of memory");
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int flag = !strcmp(a, "--jsonl") || !strcmp(a, "--mlock") || !strcmp(a, "--recache") || !strcmp(a, "-h") || !strcmp(a, "--help");
        if (a[0] == '-' && !flag && !v) {
            rc = cli_fail(cmd, "option %s needs a value", a);
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_transcribe();
            free(files);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) dir = argv[++i];
        else if (!strcmp(a, "--weights")) rc = cli_weights(cmd, argv[++i], &lo);
        else if (!strcmp(a, "--mlock")) lo.mlock = 1;
        else if (!strcmp(a, "--recache")) lo.recache = 1;
        else if (!strcmp(a, "--jsonl")) jsonl = 1;
        else if (!strcmp(a, "--kv-cache")) rc = cli_kv_cache(cmd, argv[++i], &opts.kv_bf16);
        else if (!strcmp(a, "--compute")) rc = cli_compute(cmd, argv[++i], &lo.compute_bf16);
        else if (!strcmp(a, "--kv-budget")) rc = cli_kv_budget(cmd, argv[++i], &opts.kv_budget);
        else if (!strcmp(a, "--translate")) {
            language = argv[++i];
            if (!language[0] || strlen(language) > 64 || strpbrk(language, "<>|\n"))
                rc = cli_fail(cmd, "--translate takes a language name or code (at most 64 characters, no '<', '>', '|')");
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            if (cli_int(argv[++i], 1, 1 << 20, &n)) rc = cli_fail(cmd, "-n must be a positive integer");
        } else if (!strcmp(a, "--parallel")) {
            if (cli_int(argv[++i], 1, 64, &parallel)) rc = cli_fail(cmd, "--parallel must be 1-64");
        } else if (!strcmp(a, "--max-audio-seconds")) {
            if (cli_float(argv[++i], 0.001, 1e7, &max_seconds)) rc = cli_fail(cmd, "--max-audio-seconds must be a positive number");
        } else if (a[0] == '-' && a[1]) rc = cli_fail(cmd, "unknown option '%s' (see --help)", a);
        else files[nfiles++] = a;
    }
    if (!rc && !dir) rc = cli_fail(cmd, "missing -m MODEL_DIR");
    if (!rc && !nfiles) rc = cli_fail(cmd, "no audio files given");
    if (rc) {
        free(files);
        return rc;
    }
    char prompt[192], err[1024];
    if (language) snprintf(prompt, sizeof prompt, "<|user|><|audio_1|>Translate the audio to %s.<|end|><|assistant|>", language);
    else snprintf(prompt, sizeof prompt, "<|user|><|audio_1|>Transcribe the audio clip into text.<|end|><|assistant|>");
    opts.max_seqs = (int)(parallel < nfiles ? parallel : nfiles);
    opts.limits.max_audio_seconds = max_seconds;
    pm_model *m = NULL;
    pm_engine *eng = NULL;
    file_job *jobs = calloc((size_t)nfiles, sizeof *jobs);
    if (!jobs) rc = cli_fail(cmd, "out of memory");
    else if (pm_model_load_opts(&m, dir, &lo, err, sizeof err)) rc = cli_fail(cmd, "%s", err);
    if (!rc) cli_compute_note(cmd, &lo, m);
    if (!rc && pm_engine_new(&eng, m, &opts, err, sizeof err)) rc = cli_fail(cmd, "%s", err);
    int running = 0, next = 0, out = 0, failed = 0;
    for (int i = 0; !rc && i < nfiles; i++) {
        jobs[i].path = files[i];
        jobs[i].running = &running;
        jobs[i].stream = nfiles == 1 && !jsonl;
    }
    while (!rc && out < nfiles) {
        /* admit the next files while the engine has room */
        while (next < nfiles && running < opts.max_seqs) {
            file_job *f = &jobs[next];
            if (f->state == T_WAITING && decode(f, max_seconds)) {
                f->state = T_FAILED;
                next++;
                continue;
            }
            f->state = T_LOADED;
            pm_request req = {0};
            req.prompt = prompt;
            req.audios = &f->audio;
            req.n_audios = 1;
            req.max_tokens = (int)n;
            pm_callbacks cb = {.on_token = on_text, .on_done = on_end, .user = f};
            int64_t id;
            int src = pm_engine_submit(eng, &req, &cb, &id, err, sizeof err);
            if (src == PM_EBUSY && running > 0) break; /* the KV budget is in use: after a step */
            if (src) {
                snprintf(f->error, sizeof f->error, "%.200s: %.800s", f->path, err);
                f->state = T_FAILED;
                release(f);
            } else {
                f->state = T_RUNNING;
                running++;
            }
            next++;
        }
        if (!rc && pm_engine_live(eng) > 0 && pm_engine_step(eng) < 0) rc = cli_fail(cmd, "a decode step failed");
        for (; !rc && out < nfiles && jobs[out].state >= T_DONE; out++) {
            put_file(&jobs[out], nfiles, jsonl);
            failed += jobs[out].state == T_FAILED;
        }
    }
    pm_engine_free(eng); /* ends what still runs (after an error) */
    for (int i = 0; jobs && i < nfiles; i++) {
        free(jobs[i].text);
        release(&jobs[i]);
    }
    free(jobs);
    free(files);
    pm_model_free(m);
    return rc ? rc : failed > 0;
}
