/* cli_util.c — see cli_util.h. */
#include "cli_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tok/utf8.h"

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "phi4mm %s: error: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

void *cli_read_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        fclose(f);
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        snprintf(err, errlen, "%s: cannot read %zu bytes", path, n);
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = 0;
    fclose(f);
    *len = n;
    return buf;
}

void *cli_read_input(const char *path, size_t *len, char *err, size_t errlen) {
    if (strcmp(path, "-")) return cli_read_file(path, len, err, errlen);
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0;) {
        n += got;
        if (n == cap) {
            char *p = cap <= SIZE_MAX / 4 ? realloc(buf, cap * 2 + 1) : NULL;
            if (!p) free(buf);
            buf = p;
            cap *= 2;
        }
    }
    if (!buf || ferror(stdin)) {
        snprintf(err, errlen, "-: cannot read standard input%s", buf ? ": read error" : ": out of memory");
        free(buf);
        return NULL;
    }
    if (!n) {
        snprintf(err, errlen, "-: nothing on standard input (empty, or already read for an earlier '-')");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int cli_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_float(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

int cli_weights(const char *cmd, const char *v, pm_load_options *o) {
    if (v && !pm_weight_format_parse(v, &o->weights)) return 0;
    return cli_fail(cmd, "--weights must be bf16 or q8, got '%s'", v ? v : "");
}

int cli_size(const char *s, size_t *out) {
    char *end;
    if (!s || *s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ULL << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1ULL << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1ULL << 30, end++;
    if (*end || v == 0 || v > (1ULL << 40) / mul) return -1;
    *out = (size_t)(v * mul);
    return 0;
}

int cli_kv_budget(const char *cmd, const char *v, int64_t *out) {
    size_t b;
    if (v && !strcmp(v, "auto")) *out = 0;
    else if (v && !strcmp(v, "none")) *out = -1;
    else if (v && !cli_size(v, &b)) *out = (int64_t)b;
    else return cli_fail(cmd, "--kv-budget must be auto, none or a size like 4G or 512M, got '%s'", v ? v : "");
    return 0;
}

int cli_kv_cache(const char *cmd, const char *v, int *bf16) {
    if (v && !strcmp(v, "f32")) *bf16 = 0;
    else if (v && !strcmp(v, "bf16")) *bf16 = 1;
    else return cli_fail(cmd, "--kv-cache must be f32 or bf16, got '%s'", v ? v : "");
    return 0;
}

int cli_compute(const char *cmd, const char *v, int *bf16) {
    if (v && !strcmp(v, "f32")) *bf16 = 0;
    else if (v && !strcmp(v, "bf16")) *bf16 = 1;
    else return cli_fail(cmd, "--compute must be f32 or bf16, got '%s'", v ? v : "");
    return 0;
}

void cli_compute_note(const char *cmd, const pm_load_options *o, const pm_model *m) {
    pm_model_info info;
    pm_model_get_info(m, &info);
    if (o->compute_bf16 && !info.compute_bf16)
        fprintf(stderr, "phi4mm %s: note: --compute bf16 needs AVX512-BF16, which this CPU lacks: products stay fp32\n", cmd);
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cli_draft(const char *cmd, const char *v, int *draft_tokens) {
    long k;
    if (cli_int(v, 0, PM_MAX_DRAFT, &k)) return cli_fail(cmd, "--draft must be in [0, %d], got '%s'", PM_MAX_DRAFT, v ? v : "");
    *draft_tokens = (int)k;
    return 0;
}

int cli_utf8_text(const char *cmd, const char *name, const char *s) {
    size_t n = s ? strlen(s) : 0, good = n ? pm_utf8_valid_prefix((const uint8_t *)s, n) : 0;
    return good == n ? 0 : cli_fail(cmd, "%s is not UTF-8 text (byte %zu); is the terminal's encoding UTF-8?", name, good);
}

int cli_prompt_arg(const char *cmd, const char *prompt, const char *file, const char **text, char **owned) {
    *owned = NULL;
    *text = prompt;
    if (prompt && file) return cli_fail(cmd, "-p and -f both give the prompt: one of them");
    if (!prompt && !file) return cli_fail(cmd, "missing -p PROMPT (or -f FILE)");
    if (file) {
        size_t len;
        char err[1024];
        char *t = cli_read_input(file, &len, err, sizeof err);
        if (!t) return cli_fail(cmd, "%s", err);
        if (strlen(t) != len) {
            free(t);
            return cli_fail(cmd, "%s holds a NUL byte: not text", file);
        }
        while (len && (t[len - 1] == '\n' || t[len - 1] == '\r')) t[--len] = 0;
        *text = *owned = t;
    }
    return cli_utf8_text(cmd, file ? file : "the prompt", *text);
}
