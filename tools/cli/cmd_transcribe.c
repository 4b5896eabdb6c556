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

#include "../server/subtitles.h"
#include "cli_util.h"
#include "commands.h"
#include "tok/chat.h"

enum { T_WAITING = 0, T_RUNNING, T_DONE, T_FAILED };

struct file_job;

/* One request: a file whole, or one piece of it under --chunk. */
typedef struct piece {
    struct file_job *file;
    size_t start, end;  /* samples of the file's clip */
    char *text;         /* what it generated (not when streamed) */
    size_t len, cap;
    int state;
    pm_finish why;
} piece;

typedef struct file_job {
    const char *path;
    pm_audio_in audio;  /* decoded, until its last piece ends */
    int decoded, rate;  /* its sample rate (kept once the samples are freed) */
    piece *pieces;
    int n_pieces, submitted, ended, printed;
    int said, subs;     /* text of it printed (subtitles: cues written); --srt 1 / --vtt 2: cues instead of text */
    int state, stream;
    char error[1024];
    int *running;       /* the pieces in the engine */
} file_job;

static void release(file_job *f) {
    if (f->decoded) pm_audio_in_free(&f->audio);
    f->decoded = 0;
}

/* The file's first failure ("FILE: what") is the one it reports. */
static void file_fail(file_job *f, const char *what) {
    if (!f->error[0]) snprintf(f->error, sizeof f->error, "%.200s: %.800s", f->path, what);
}

/* Reads and decodes the file (at most max_seconds of it) and cuts it into pieces of at most chunk
 * seconds (0: one piece); 0, or -1 with f->error set. */
static int decode(file_job *f, double max_seconds, double chunk) {
    size_t len;
    void *buf = cli_read_input(f->path, &len, f->error, sizeof f->error);
    if (!buf) return -1;
    int rc = pm_audio_decode_max(buf, len, f->path, max_seconds, &f->audio, f->error, sizeof f->error);
    free(buf);
    if (rc) return -1;
    f->decoded = 1;
    f->rate = f->audio.sample_rate;
    double seconds = (double)f->audio.n_samples / f->audio.sample_rate;
    pm_audio_span one = {0, f->audio.n_samples}, *spans = &one;
    int k = chunk > 0 ? pm_audio_split(&f->audio, chunk, &spans) : 1;
    if (chunk <= 0 && seconds > 40.0)
        fprintf(stderr, "phi4mm transcribe: note: %s is %.1f s long; the model card gives 40 s for the best recognition "
                        "(--chunk 30 cuts it into pieces)\n", f->path, seconds);
    f->pieces = k > 0 ? calloc((size_t)k, sizeof *f->pieces) : NULL;
    if (!f->pieces) {
        if (spans != &one) free(spans);
        snprintf(f->error, sizeof f->error, "%.200s: out of memory", f->path);
        release(f);
        return -1;
    }
    for (int i = 0; i < k; i++) f->pieces[i] = (piece){.file = f, .start = spans[i].start, .end = spans[i].end};
    f->n_pieces = k;
    if (spans != &one) free(spans);
    return 0;
}

static int on_text(void *user, int32_t token, const char *text, size_t len) {
    piece *p = user;
    (void)token;
    if (p->file->stream) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        return 0;
    }
    if (p->len + len + 1 > p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        while (cap < p->len + len + 1) cap *= 2;
        char *t = realloc(p->text, cap);
        if (!t) return 1; /* cancels: the file fails for want of memory */
        p->text = t;
        p->cap = cap;
    }
    memcpy(p->text + p->len, text, len);
    p->len += len;
    p->text[p->len] = 0;
    return 0;
}

/* A piece that ended (or was never run): the file ends with its last piece. */
static void piece_ended(piece *p) {
    file_job *f = p->file;
    if (++f->ended < f->n_pieces) return;
    f->state = f->error[0] ? T_FAILED : T_DONE;
    release(f);
}

static void on_end(void *user, pm_finish why, int prompt, int completion, const char *error) {
    piece *p = user;
    file_job *f = p->file;
    (void)prompt;
    (void)completion;
    p->why = why;
    p->state = why == PM_FINISH_STOP || why == PM_FINISH_LENGTH ? T_DONE : T_FAILED;
    if (p->state == T_FAILED) {
        char what[900];
        if (f->n_pieces > 1)
            snprintf(what, sizeof what, "piece %.1f-%.1f s: %.800s", (double)p->start / f->rate,
                     (double)p->end / f->rate, error ? error : "cancelled (out of memory for its text)");
        else snprintf(what, sizeof what, "%.800s", error ? error : "cancelled (out of memory for its text)");
        file_fail(f, what);
    }
    (*f->running)--;
    piece_ended(p);
}

/* A piece's text without the spaces around it, as pieces are joined by one space. */
static const char *trimmed(const piece *p, size_t *len) {
    const char *t = p->text ? p->text : "";
    size_t a = 0, b = p->len;
    while (a < b && (t[a] == ' ' || t[a] == '\n' || t[a] == '\t' || t[a] == '\r')) a++;
    while (b > a && (t[b - 1] == ' ' || t[b - 1] == '\n' || t[b - 1] == '\t' || t[b - 1] == '\r')) b--;
    *len = b - a;
    return t + a;
}

/* Text mode: the file's pieces done so far, in order, after those already printed (a long file
 * shows as it goes), joined by a space; the line ends with the file. --srt / --vtt: a cue each. */
static void put_pieces(file_job *f, int nfiles) {
    if (f->stream) return;
    for (; f->printed < f->n_pieces && f->pieces[f->printed].state == T_DONE; f->printed++) {
        const piece *p = &f->pieces[f->printed];
        size_t len = p->len;
        const char *t = f->n_pieces > 1 || f->subs ? trimmed(p, &len) : p->text;
        if (f->subs) {
            if (f->printed == 0) srv_subtitles_header(stdout, f->subs == 2);
            if (len) srv_subtitles_cue(stdout, f->subs == 2, ++f->said, (double)p->start / f->rate, (double)p->end / f->rate, t, len);
            continue;
        }
        if (f->printed == 0 && nfiles > 1) printf("%s: ", f->path);
        if (f->said && len) fputc(' ', stdout);
        fwrite(t ? t : "", 1, len, stdout);
        f->said |= len > 0;
    }
    fflush(stdout);
}

/* Prints a finished file: the rest of its text (jsonl: one JSON object a line, with the pieces as
 * segments under --chunk), or its error on stderr. */
static void put_file(file_job *f, int nfiles, int jsonl, int chunked) {
    if (jsonl) {
        json_t *o = json_pack("{s:s}", "file", f->path);
        if (f->state == T_DONE) {
            json_t *segs = json_array();
            char *all = NULL;
            size_t all_len = 0;
            FILE *mem = open_memstream(&all, &all_len);
            int cut = 0;
            for (int i = 0; i < f->n_pieces; i++) {
                const piece *p = &f->pieces[i];
                size_t len = p->len;
                const char *t = f->n_pieces > 1 ? trimmed(p, &len) : (p->text ? p->text : "");
                if (mem && len) {
                    if (ftell(mem) > 0) fputc(' ', mem);
                    fwrite(t, 1, len, mem);
                }
                cut |= p->why == PM_FINISH_LENGTH;
                json_array_append_new(segs, json_pack("{s:f,s:f,s:s%,s:s}", "start", (double)p->start / f->rate, "end",
                                                      (double)p->end / f->rate, "text", t, len, "finish",
                                                      p->why == PM_FINISH_STOP ? "stop" : "length"));
            }
            if (mem) fclose(mem);
            json_object_set_new(o, "text", json_stringn(all ? all : "", all ? all_len : 0));
            json_object_set_new(o, "finish", json_string(cut ? "length" : "stop"));
            if (chunked) json_object_set_new(o, "segments", segs);
            else json_decref(segs);
            free(all);
        } else {
            json_object_set_new(o, "error", json_string(f->error));
        }
        char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (s) puts(s);
        free(s);
        json_decref(o);
    } else {
        put_pieces(f, nfiles);
        if (!f->subs && (f->state == T_DONE || f->printed > 0 || f->stream)) fputc('\n', stdout);
    }
    if (f->state == T_FAILED) cli_fail("transcribe", "%s", f->error);
    fflush(stdout);
}

static void usage_transcribe(void) {
    fprintf(stderr,
            "usage: phi4mm transcribe -m MODEL_DIR [options] FILE...\n"
            "  speech recognition with the official instruction, a line per file (FILE: text when there\n"
            "  are several), in the order given; FILE - is standard input (a pipe: ffmpeg ... -f wav - |)\n"
            "  -n, --max-tokens N    tokens per file at most (default 512)\n"
            "  --translate LANGUAGE  translate the speech to LANGUAGE instead (\"Translate the audio to ...\")\n"
            "  --prompt TEXT         the instruction instead (after the clip; one that places <|audio_1|> itself\n"
            "                        is the whole user turn), as the server's prompt field\n"
            "  --parallel N          files decoded together, 1-64 (default 8): one pass over the weights\n"
            "                        a step for all of them; each file's text is the one it gets alone\n"
            "  --jsonl               a JSON object a line: {\"file\", \"text\", \"finish\"} or {\"file\", \"error\"}\n"
            "  --max-audio-seconds S a file's limit (default 1800)\n"
            "  --chunk S             long-form: a file longer than S seconds (>= 1; the model card gives 40 s for\n"
            "                        the best recognition) is cut at its quietest moments into pieces of at most\n"
            "                        S s, about equal, decoded side by side and joined by a space (--jsonl: with\n"
            "                        \"segments\" [{start, end, text, finish}]); default: files whole\n"
            "  --srt, --vtt          one FILE's subtitles (SubRip / WebVTT) instead of text: a cue a piece\n"
            "                        (with --chunk S, e.g. 6 for subtitle-sized cues), or one for the file\n"
            "  --weights bf16|q8, --mlock, --recache, --kv-cache f32|bf16, --compute f32|bf16, --kv-budget SIZE\n"
            "                        as for generate\n"
            "a file that cannot be transcribed is named on stderr, the others go on; exit status 1 if any failed\n");
}

int pm_cmd_transcribe(int argc, char **argv) {
    const char *cmd = "transcribe", *dir = NULL, *language = NULL, *instruction = NULL;
    long n = 512, parallel = 8;
    double max_seconds = 0, chunk = 0;
    int rc = 0, jsonl = 0, subs = 0, nfiles = 0;
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
        int flag = !strcmp(a, "--jsonl") || !strcmp(a, "--srt") || !strcmp(a, "--vtt") || !strcmp(a, "--mlock") || !strcmp(a, "--recache") ||
                   !strcmp(a, "-h") || !strcmp(a, "--help");
        if (a[0] == '-' && a[1] && !flag && !v) { /* "-" alone is standard input */
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
        else if (!strcmp(a, "--srt")) subs = 1;
        else if (!strcmp(a, "--vtt")) subs = 2;
        else if (!strcmp(a, "--kv-cache")) rc = cli_kv_cache(cmd, argv[++i], &opts.kv_bf16);
        else if (!strcmp(a, "--compute")) rc = cli_compute(cmd, argv[++i], &lo.compute_bf16);
        else if (!strcmp(a, "--kv-budget")) rc = cli_kv_budget(cmd, argv[++i], &opts.kv_budget);
        else if (!strcmp(a, "--translate")) {
            language = argv[++i];
            if (!language[0] || strlen(language) > 64 || strpbrk(language, "<>|\n"))
                rc = cli_fail(cmd, "--translate takes a language name or code (at most 64 characters, no '<', '>', '|')");
        } else if (!strcmp(a, "--prompt")) {
            instruction = argv[++i];
            size_t len = strlen(instruction);
            if (!len || len > 4096) rc = cli_fail(cmd, "--prompt takes an instruction of 1-4096 bytes");
            else rc = cli_utf8_text(cmd, "--prompt", instruction);
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            if (cli_int(argv[++i], 1, 1 << 20, &n)) rc = cli_fail(cmd, "-n must be a positive integer");
        } else if (!strcmp(a, "--parallel")) {
            if (cli_int(argv[++i], 1, 64, &parallel)) rc = cli_fail(cmd, "--parallel must be 1-64");
        } else if (!strcmp(a, "--chunk")) {
            if (cli_float(argv[++i], 1.0, 1e7, &chunk)) rc = cli_fail(cmd, "--chunk must be a number of seconds, at least 1");
        } else if (!strcmp(a, "--max-audio-seconds")) {
            if (cli_float(argv[++i], 0.001, 1e7, &max_seconds)) rc = cli_fail(cmd, "--max-audio-seconds must be a positive number");
        } else if (a[0] == '-' && a[1]) rc = cli_fail(cmd, "unknown option '%s' (see --help)", a);
        else files[nfiles++] = a;
    }
    if (!rc && !dir) rc = cli_fail(cmd, "missing -m MODEL_DIR");
    if (!rc && !nfiles) rc = cli_fail(cmd, "no audio files given");
    if (!rc && language && instruction) rc = cli_fail(cmd, "--translate and --prompt both give the instruction: one of them");
    if (!rc && subs && (jsonl || nfiles > 1)) rc = cli_fail(cmd, "--srt / --vtt write one recording's subtitles: one FILE, without --jsonl");
    if (rc) {
        free(files);
        return rc;
    }
    char prompt[4352], err[1024];
    if (language) snprintf(prompt, sizeof prompt, "<|user|><|audio_1|>Translate the audio to %s.<|end|><|assistant|>", language);
    else if (instruction) /* the clip first, as the model card writes it, unless the instruction places it */
        snprintf(prompt, sizeof prompt, "<|user|>%s%s<|end|><|assistant|>", strstr(instruction, "<|audio_1|>") ? "" : "<|audio_1|>", instruction);
    else snprintf(prompt, sizeof prompt, "<|user|><|audio_1|>Transcribe the audio clip into text.<|end|><|assistant|>");
    if (instruction) { /* its placeholders checked once, before any file is read */
        char *rew = NULL;
        pm_err pe = {0};
        if (pm_prompt_rewrite_placeholders(prompt, 0, 1, &rew, &pe)) rc = cli_fail(cmd, "--prompt: %s", pe.msg);
        free(rew);
        if (rc) {
            free(files);
            return rc;
        }
    }
    opts.max_seqs = (int)(parallel < nfiles || chunk > 0 ? parallel : nfiles); /* a file may be many pieces */
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
        jobs[i].subs = subs;
    }
    while (!rc && out < nfiles) {
        /* admit the next pieces while the engine has room */
        while (next < nfiles && running < opts.max_seqs) {
            file_job *f = &jobs[next];
            if (f->state == T_WAITING) {
                if (decode(f, max_seconds, chunk)) {
                    f->state = T_FAILED;
                    next++;
                    continue;
                }
                f->state = T_RUNNING;
                f->stream = nfiles == 1 && !jsonl && !subs && f->n_pieces == 1;
            }
            piece *p = &f->pieces[f->submitted];
            if (f->error[0]) { /* an earlier piece failed: the file has failed, the rest is not run */
                f->submitted++;
                piece_ended(p);
                if (f->submitted == f->n_pieces) next++;
                continue;
            }
            pm_audio_in clip = {f->audio.samples + p->start, p->end - p->start, f->audio.sample_rate};
            pm_request req = {0};
            req.prompt = prompt;
            req.audios = &clip;
            req.n_audios = 1;
            req.max_tokens = (int)n;
            pm_callbacks cb = {.on_token = on_text, .on_done = on_end, .user = p};
            int64_t id;
            int src = pm_engine_submit(eng, &req, &cb, &id, err, sizeof err);
            if (src == PM_EBUSY && running > 0) break; /* the KV budget is in use: after a step */
            f->submitted++;
            if (src) {
                p->state = T_FAILED;
                file_fail(f, err);
                piece_ended(p);
            } else {
                p->state = T_RUNNING;
                running++;
            }
            if (f->submitted == f->n_pieces) next++;
        }
        if (!rc && pm_engine_live(eng) > 0 && pm_engine_step(eng) < 0) rc = cli_fail(cmd, "a decode step failed");
        if (!rc && !jsonl && out < nfiles && jobs[out].state == T_RUNNING) put_pieces(&jobs[out], nfiles);
        for (; !rc && out < nfiles && jobs[out].state >= T_DONE; out++) {
            put_file(&jobs[out], nfiles, jsonl, chunk > 0);
            failed += jobs[out].state == T_FAILED;
        }
    }
    pm_engine_free(eng); /* ends what still runs (after an error) */
    for (int i = 0; jobs && i < nfiles; i++) {
        for (int k = 0; k < jobs[i].n_pieces; k++) free(jobs[i].pieces[k].text);
        free(jobs[i].pieces);
        release(&jobs[i]);
    }
    free(jobs);
    free(files);
    pm_model_free(m);
    return rc ? rc : failed > 0;
}
