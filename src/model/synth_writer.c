/* synth_writer.c — see synth_writer.h.
 *
 * Value generation: every tensor has its own splitmix64 stream seeded by (seed, FNV-1a of its
 * name); each 64-bit draw gives four 16-bit indices into a table of the 65536 standard-normal
 * quantiles, scaled by the tensor's std and shifted by its mean, rounded to bf16 (nearest even).
 * That is ~1 ns per value, so writing is bound by the disk.
 *
 * Streaming: the main thread fills one of two 8 MB buffers while a writer thread write()s the
 * other; every 256 MB the written range is pushed to disk and dropped from the page cache so the
 * 11 GB never sit in memory. Files go to `.synth-tmp-<name>`, are fsync'ed, then all renamed. */
#include "synth_writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/ckpt_layout.h"
#include "model/synth_presets.h"
#include "model/synth_tokenizer.h"

#define BUF_BYTES (8u << 20)
#define FLUSH_BYTES ((uint64_t)256 << 20)
#define FULL_SHARD_BYTES 2500000000ull
#define MARKER ".phi4mm-synth"
#define TMP_PREFIX ".synth-tmp-"

/* ---- values --------------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
    return h;
}

/* Inverse of the standard normal CDF (Acklam's rational approximation, |rel err| < 1.2e-9). */
static double norm_quantile(double p) {
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                               1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                               6.680131188771972e+01,  -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                               -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                               3.754408661907416e+00};
    const double lo = 0.02425;
    if (p < lo) {
        double q = sqrt(-2 * log(p));
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    if (p > 1 - lo) return -norm_quantile(1 - p);
    double q = p - 0.5, r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

typedef struct gauss_table {
    float v[65536];
} gauss_table;

static void gauss_table_init(gauss_table *t) {
    for (int i = 0; i < 65536; i++) t->v[i] = (float)norm_quantile((i + 0.5) / 65536.0);
}

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* How a tensor is initialised: mean + std * N(0, 1). For the token embedding, rows of ids the
 * synthetic tokenizer prints as ASCII (see loud_row) use std, the others std_tail. */
typedef struct init_rule {
    float mean, std, std_tail;
    int n_vocab;       /* ordinary tokens of the synthetic tokenizer; -1: not the token embedding */
    int64_t row;       /* row length of the token embedding */
} init_rule;

/* Ids whose text is printable ASCII: byte tokens '!'..'~' (ids 0..93), '\n' (198), ' ' (220) and
 * every learned merge (the training text is ASCII). Byte tokens >= 0x80 would print U+FFFD. */
static int loud_row(int64_t id, int n_vocab) {
    return id < 94 || id == 198 || id == 220 || (id >= 256 && id < n_vocab);
}

static init_rule rule_for(const pm_ckpt_entry *en, int64_t hidden, int n_vocab_tokens) {
    init_rule r = {.mean = 0, .std = 0.02f, .std_tail = 0, .n_vocab = -1, .row = 1};
    const char *n = en->name;
    int64_t numel = pm_ckpt_entry_numel(en);
    if (ends_with(n, "embed_tokens.weight")) {
        /* tied lm_head: printable ids get logits of std ~4, the rest (and the special ids) ~0.02 */
        r.std = 4.0f / sqrtf((float)hidden);
        r.std_tail = 0.02f / sqrtf((float)hidden);
        r.n_vocab = n_vocab_tokens;
        r.row = en->shape[1];
    } else if (ends_with(n, "global_mean")) {
        r.mean = 18.0f, r.std = 1.0f;
    } else if (ends_with(n, "global_invstd")) {
        r.mean = 0.33f, r.std = 0.04f;
    } else if (strstr(n, "norm") && ends_with(n, ".weight")) {
        r.mean = 1.0f, r.std = 0.05f;
    } else if (ends_with(n, "pw_conv_simplify_w")) {
        r.mean = 1.0f, r.std = 0.05f;
    } else if (ends_with(n, "bias") || ends_with(n, "glu.b1") || ends_with(n, "glu.b2") || ends_with(n, "_simplify_b")) {
        r.std = 0.02f;
    } else if (ends_with(n, "_GN") || ends_with(n, "head.probe")) {
        r.std = 0.5f;
    } else if (strstr(n, "relative_attention_bias_layer") || strstr(n, "position_embedding")) {
        r.std = 0.1f;
    } else {
        int64_t fan_in = en->ndim > 1 ? numel / en->shape[0] : numel;
        float s = 1.0f / sqrtf((float)(fan_in > 0 ? fan_in : 1));
        if (s > 0.5f) s = 0.5f;
        if (s < 0.005f) s = 0.005f;
        if (strstr(n, ".lora_B.")) s *= 0.1f;
        r.std = s;
    }
    return r;
}

/* A tensor's value stream. */
typedef struct gen {
    const gauss_table *tab;
    init_rule rule;
    uint64_t state, bits;
    int left;          /* 16-bit draws left in `bits` */
    int64_t pos;       /* elements produced so far */
} gen;

static void gen_start(gen *g, const gauss_table *tab, const pm_ckpt_entry *en, int64_t hidden, int n_vocab, uint64_t seed) {
    g->tab = tab;
    g->rule = rule_for(en, hidden, n_vocab);
    g->state = seed ^ fnv1a(en->name);
    g->bits = 0;
    g->left = 0;
    g->pos = 0;
}

static void gen_fill(gen *g, uint16_t *out, int64_t count) {
    const float *tv = g->tab->v;
    const float mean = g->rule.mean;
    int64_t i = 0;
    while (i < count) {
        float std = g->rule.std;
        int64_t run = count - i;
        if (g->rule.n_vocab >= 0) {
            /* one embedding row at a time: its std depends on the token id */
            int64_t id = g->pos / g->rule.row, in_row = g->rule.row - g->pos % g->rule.row;
            if (run > in_row) run = in_row;
            if (!loud_row(id, g->rule.n_vocab)) std = g->rule.std_tail;
        }
        for (int64_t k = 0; k < run; k++) {
            if (!g->left) {
                g->bits = splitmix64(&g->state);
                g->left = 4;
            }
            uint32_t idx = (uint32_t)(g->bits & 0xFFFFu);
            g->bits >>= 16;
            g->left--;
            out[i + k] = f32_to_bf16(mean + std * tv[idx]);
        }
        i += run;
        g->pos += run;
    }
}

int pm_synth_values(const pm_ckpt_entry *en, int64_t hidden, int n_vocab_tokens, uint64_t seed, uint16_t *out,
                    int64_t count) {
    gauss_table *tab = malloc(sizeof *tab);
    if (!tab) return PM_ENOMEM;
    gauss_table_init(tab);
    gen g;
    gen_start(&g, tab, en, hidden, n_vocab_tokens, seed);
    gen_fill(&g, out, count);
    free(tab);
    return PM_OK;
}

/* ---- files ---------------------------------------------------------------------------------- */

typedef struct outfile {
    char final[1024], tmp[1024];
} outfile;

typedef struct plan {
    const char *dir;
    outfile *files;
    int n_files, cap_files;
} plan;

static outfile *plan_add(plan *p, const char *name, pm_err *e) {
    if (p->n_files == p->cap_files) {
        int cap = p->cap_files ? p->cap_files * 2 : 16;
        outfile *f = realloc(p->files, sizeof *f * (size_t)cap);
        if (!f) {
            pm_errf(e, PM_ENOMEM, "synth: out of memory");
            return NULL;
        }
        p->files = f;
        p->cap_files = cap;
    }
    outfile *f = &p->files[p->n_files];
    if ((size_t)snprintf(f->final, sizeof f->final, "%s/%s", p->dir, name) >= sizeof f->final ||
        (size_t)snprintf(f->tmp, sizeof f->tmp, "%s/" TMP_PREFIX "%s", p->dir, name) >= sizeof f->tmp) {
        pm_errf(e, PM_EINVAL, "synth: output path too long: %s/%s", p->dir, name);
        return NULL;
    }
    p->n_files++;
    return f;
}

static int write_all(int fd, const void *buf, size_t len, const char *path, pm_err *e) {
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return pm_errf(e, PM_EIO, "%s: write failed: %s", path, strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    return PM_OK;
}

static int write_text_file(const outfile *f, const char *text, pm_err *e) {
    int fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return pm_errf(e, PM_EIO, "%s: cannot create: %s", f->tmp, strerror(errno));
    int rc = write_all(fd, text, strlen(text), f->tmp, e);
    if (!rc && fsync(fd)) rc = pm_errf(e, PM_EIO, "%s: fsync failed: %s", f->tmp, strerror(errno));
    if (close(fd) && !rc) rc = pm_errf(e, PM_EIO, "%s: close failed: %s", f->tmp, strerror(errno));
    return rc;
}

static int mkdir_p(const char *dir, pm_err *e) {
    char buf[1024];
    if ((size_t)snprintf(buf, sizeof buf, "%s", dir) >= sizeof buf) return pm_errf(e, PM_EINVAL, "synth: path too long: %s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return pm_errf(e, PM_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) return pm_errf(e, PM_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
    return PM_OK;
}

/* Creates dir or checks that it may be overwritten: empty, a previous synth output (marker file),
 * only leftovers of an interrupted synth, or force. */
static int prepare_dir(const char *dir, int force, pm_err *e) {
    struct stat st;
    if (stat(dir, &st)) {
        if (errno != ENOENT) return pm_errf(e, PM_EIO, "%s: %s", dir, strerror(errno));
        return mkdir_p(dir, e);
    }
    if (!S_ISDIR(st.st_mode)) return pm_errf(e, PM_EINVAL, "%s: exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (!d) return pm_errf(e, PM_EIO, "%s: cannot read directory: %s", dir, strerror(errno));
    int others = 0, marker = 0;
    char first[256] = "";
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (!strcmp(de->d_name, MARKER)) marker = 1;
        else if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX))) {
            if (!others++) snprintf(first, sizeof first, "%s", de->d_name);
        }
    }
    closedir(d);
    if (others && !marker && !force)
        return pm_errf(e, PM_EINVAL,
                       "%s: directory is not empty (it has '%s') and is not a previous `phi4mm synth` output; "
                       "choose another --out or pass --force to overwrite",
                       dir, first);
    return PM_OK;
}

/* Marks the directory as a synth output (written first, so an interrupted run can be redone). */
static int write_marker(const pm_synth_opts *o, pm_err *e) {
    char mpath[1100];
    snprintf(mpath, sizeof mpath, "%s/" MARKER, o->out_dir);
    FILE *mf = fopen(mpath, "w");
    if (!mf) return pm_errf(e, PM_EIO, "%s: cannot write: %s", mpath, strerror(errno));
    int bad = fprintf(mf, "{\"preset\": \"%s\", \"seed\": %llu}\n", o->preset, (unsigned long long)o->seed) < 0;
    if (fclose(mf) || bad) return pm_errf(e, PM_EIO, "%s: cannot write: %s", mpath, strerror(errno));
    return PM_OK;
}

/* Removes shard files of an older synth (other shard count) and temporary leftovers. */
static void remove_stale(const char *dir, const plan *p) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char path[1300];
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        int shard = !strncmp(nm, "model-", 6) && strstr(nm, "-of-") && ends_with(nm, ".safetensors");
        int tmp = !strncmp(nm, TMP_PREFIX, strlen(TMP_PREFIX));
        if (!shard && !tmp) continue;
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        int keep = 0;
        for (int i = 0; i < p->n_files && !keep; i++) keep = !strcmp(p->files[i].final, path);
        if (!keep) unlink(path);
    }
    closedir(d);
}

/* ---- streaming writer --------------------------------------------------------------------- */

typedef struct stream {
    /* shared with the writer thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint16_t *buf[2];
    size_t len[2];      /* bytes ready in buf[i]; 0 = free */
    int fd;
    const char *path;
    int quit, failed;
    pm_err err;
    uint64_t written, flushed, dropped; /* bytes written / writeback started / dropped from cache */
    int threaded;
    int next;           /* buffer the main thread fills next (kept across shards) */
    pthread_t th;
    /* progress */
    uint64_t done, total;
    void (*progress)(void *, uint64_t, uint64_t);
    void *ud;
} stream;

/* Pushes what was written to disk and drops it from the page cache (Linux), every FLUSH_BYTES. */
static void stream_flush_range(stream *s, int final) {
#if defined(__linux__)
    /* Start writeback of the newest window without waiting; wait for the window before it (long
     * done by then, so the disk queue never runs dry) and drop it from the page cache. */
    if (s->written - s->flushed >= FLUSH_BYTES || final) {
        if (s->flushed > s->dropped) {
            sync_file_range(s->fd, (off_t)s->dropped, (off_t)(s->flushed - s->dropped),
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
            posix_fadvise(s->fd, (off_t)s->dropped, (off_t)(s->flushed - s->dropped), POSIX_FADV_DONTNEED);
            s->dropped = s->flushed;
        }
        sync_file_range(s->fd, (off_t)s->flushed, (off_t)(s->written - s->flushed), SYNC_FILE_RANGE_WRITE);
        s->flushed = s->written;
        if (final) {
            sync_file_range(s->fd, (off_t)s->dropped, (off_t)(s->flushed - s->dropped),
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
            posix_fadvise(s->fd, (off_t)s->dropped, (off_t)(s->flushed - s->dropped), POSIX_FADV_DONTNEED);
            s->dropped = s->flushed;
        }
    }
#else
    (void)s;
    (void)final;
#endif
}

static void *writer_main(void *arg) {
    stream *s = arg;
    int k = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->len[k] && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->len[k] && s->quit) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        size_t len = s->len[k];
        int failed = s->failed;
        pthread_mutex_unlock(&s->mu);
        int rc = failed ? PM_OK : write_all(s->fd, s->buf[k], len, s->path, &s->err);
        if (!rc && !failed) {
            s->written += len;
            stream_flush_range(s, 0);
        }
        pthread_mutex_lock(&s->mu);
        if (rc) s->failed = 1;
        s->len[k] = 0;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        k ^= 1;
    }
}

/* Hands buffer k (len bytes) to the writer (or writes it now when unthreaded). */
static int stream_submit(stream *s, int k, size_t len, pm_err *e) {
    s->done += len;
    if (!s->threaded) {
        int rc = write_all(s->fd, s->buf[k], len, s->path, e);
        if (!rc) {
            s->written += len;
            stream_flush_range(s, 0);
        }
        if (s->progress) s->progress(s->ud, s->done, s->total);
        return rc;
    }
    pthread_mutex_lock(&s->mu);
    s->len[k] = len;
    pthread_cond_broadcast(&s->cv);
    int failed = s->failed;
    pthread_mutex_unlock(&s->mu);
    if (s->progress) s->progress(s->ud, s->done, s->total);
    if (failed) return pm_errf(e, s->err.code ? s->err.code : PM_EIO, "%s", s->err.msg);
    return PM_OK;
}

/* Waits until buffer k is free again. */
static int stream_wait_free(stream *s, int k, pm_err *e) {
    if (!s->threaded) return PM_OK;
    pthread_mutex_lock(&s->mu);
    while (s->len[k]) pthread_cond_wait(&s->cv, &s->mu);
    int failed = s->failed;
    pthread_mutex_unlock(&s->mu);
    if (failed) return pm_errf(e, s->err.code ? s->err.code : PM_EIO, "%s", s->err.msg);
    return PM_OK;
}

static int stream_drain(stream *s, pm_err *e) {
    int rc = stream_wait_free(s, 0, e);
    if (!rc) rc = stream_wait_free(s, 1, e);
    return rc;
}

/* ---- shards ------------------------------------------------------------------------------- */

typedef struct tensor_ref {
    const pm_ckpt_entry *en;
    int shard;
    uint64_t bytes;
} tensor_ref;

static int cmp_ref_name(const void *a, const void *b) {
    return strcmp(((const tensor_ref *)a)->en->name, ((const tensor_ref *)b)->en->name);
}

/* Builds the safetensors header of one shard (tensors refs[0..n), sorted by name, data in that
 * order), padded with spaces to a multiple of 8. */
static char *shard_header(const tensor_ref *refs, int n, size_t *len_out, pm_err *e) {
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < refs[i].en->ndim; d++) json_array_append_new(shape, json_integer(refs[i].en->shape[d]));
        json_t *t = json_pack("{s:s,s:o,s:[I,I]}", "dtype", "BF16", "shape", shape, "data_offsets", (json_int_t)off,
                              (json_int_t)(off + refs[i].bytes));
        json_object_set_new(h, refs[i].en->name, t);
        off += refs[i].bytes;
    }
    char *js = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (!js) {
        pm_errf(e, PM_ENOMEM, "synth: cannot serialise a shard header");
        return NULL;
    }
    size_t jl = strlen(js), pad = (8 - jl % 8) % 8;
    char *out = malloc(8 + jl + pad);
    if (!out) {
        free(js);
        pm_errf(e, PM_ENOMEM, "synth: out of memory");
        return NULL;
    }
    uint64_t hl = jl + pad;
    for (int i = 0; i < 8; i++) out[i] = (char)(hl >> (8 * i));
    memcpy(out + 8, js, jl);
    memset(out + 8 + jl, ' ', pad);
    free(js);
    *len_out = 8 + jl + pad;
    return out;
}

typedef struct ctx {
    const pm_synth_opts *o;
    gauss_table *tab;
    int64_t hidden;
    int n_vocab;
    stream s;
} ctx;

static int write_shard(ctx *c, const outfile *f, tensor_ref *refs, int n, pm_err *e) {
    size_t hlen;
    char *hdr = shard_header(refs, n, &hlen, e);
    if (!hdr) return e->code;
    int fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(hdr);
        return pm_errf(e, PM_EIO, "%s: cannot create: %s", f->tmp, strerror(errno));
    }
    stream *s = &c->s;
    s->fd = fd;
    s->path = f->tmp;
    s->written = s->flushed = s->dropped = 0;
    int rc = write_all(fd, hdr, hlen, f->tmp, e);
    free(hdr);
    if (!rc) s->written = hlen;
    int k = s->next;
    size_t fill = 0;
    const size_t cap = BUF_BYTES / 2;
    for (int i = 0; i < n && !rc; i++) {
        gen g;
        gen_start(&g, c->tab, refs[i].en, c->hidden, c->n_vocab, c->o->seed);
        int64_t left = pm_ckpt_entry_numel(refs[i].en);
        while (left > 0 && !rc) {
            int64_t take = (int64_t)(cap - fill);
            if (take > left) take = left;
            gen_fill(&g, s->buf[k] + fill, take);
            fill += (size_t)take;
            left -= take;
            if (fill == cap) {
                rc = stream_submit(s, k, fill * 2, e);
                k ^= 1;
                fill = 0;
                if (!rc) rc = stream_wait_free(s, k, e);
            }
        }
    }
    if (!rc && fill) {
        rc = stream_submit(s, k, fill * 2, e);
        k ^= 1;
    }
    s->next = k;
    if (!rc) rc = stream_drain(s, e);
    else stream_drain(s, &(pm_err){0});
    if (!rc) {
        stream_flush_range(s, 1);
        if (fsync(fd)) rc = pm_errf(e, PM_EIO, "%s: fsync failed: %s", f->tmp, strerror(errno));
    }
    if (close(fd) && !rc) rc = pm_errf(e, PM_EIO, "%s: close failed: %s", f->tmp, strerror(errno));
    return rc;
}

/* Assigns tensors (module order) to n shards of about equal bytes; no shard is left empty. */
static int assign_shards(tensor_ref *refs, int n, int n_shards, uint64_t total) {
    uint64_t cum = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        uint64_t mid = cum + refs[i].bytes / 2;
        int s = (int)((long double)mid * n_shards / (long double)total);
        if (s >= n_shards) s = n_shards - 1;
        if (s < last) s = last;
        if (s > last + 1) s = last + 1; /* no gaps */
        refs[i].shard = s;
        last = s;
        cum += refs[i].bytes;
    }
    return last + 1;
}

int pm_synth_write(const pm_synth_opts *o, pm_synth_result *res, pm_err *e) {
    memset(res, 0, sizeof *res);
    if (!pm_synth_preset_known(o->preset))
        return pm_errf(e, PM_EINVAL, "synth: unknown preset '%s' (use tiny or full)", o->preset ? o->preset : "(none)");
    if (!o->out_dir || !*o->out_dir) return pm_errf(e, PM_EINVAL, "synth: no output directory given");

    int rc = PM_OK;
    char *texts[4] = {0}, *tok = NULL, *index_txt = NULL;
    json_t *cfg = NULL;
    pm_ckpt_entry *ents = NULL;
    tensor_ref *refs = NULL;
    plan p = {.dir = o->out_dir};
    ctx c = {.o = o};
    int n = 0, n_shards = 0, stream_ready = 0;

    for (int i = 0; i < 4 && !rc; i++)
        if (!(texts[i] = pm_synth_preset_text(o->preset, (pm_synth_file)i))) rc = pm_errf(e, PM_ENOMEM, "synth: out of memory");
    if (!rc) {
        json_error_t je;
        cfg = json_loads(texts[PM_SYNTH_FILE_CONFIG], 0, &je);
        if (!cfg) rc = pm_errf(e, PM_ESTATE, "synth: embedded config of preset %s is invalid: %s", o->preset, je.text);
    }
    if (!rc) rc = pm_ckpt_layout(cfg, &ents, &n, e);
    if (!rc) rc = pm_synth_tokenizer_json(&tok, &c.n_vocab, e);
    if (!rc) {
        c.hidden = (int64_t)json_integer_value(json_object_get(cfg, "hidden_size"));
        refs = calloc((size_t)n, sizeof *refs);
        if (!refs) rc = pm_errf(e, PM_ENOMEM, "synth: out of memory");
    }
    uint64_t total = 0;
    if (!rc) {
        for (int i = 0; i < n; i++) {
            refs[i].en = &ents[i];
            refs[i].bytes = (uint64_t)pm_ckpt_entry_numel(&ents[i]) * 2;
            total += refs[i].bytes;
        }
        int want = o->n_shards > 0 ? o->n_shards
                   : !strcmp(o->preset, "tiny") ? 2
                                                : (int)((total + FULL_SHARD_BYTES - 1) / FULL_SHARD_BYTES);
        if (want > n) want = n;
        n_shards = assign_shards(refs, n, want, total);
    }
    if (!rc) rc = prepare_dir(o->out_dir, o->force, e);
    if (!rc) rc = write_marker(o, e);

    /* plan the output files: shards first, then the small files */
    for (int s = 0; s < n_shards && !rc; s++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        if (!plan_add(&p, name, e)) rc = e->code;
    }
    const char *small_names[] = {"config.json", "preprocessor_config.json", "generation_config.json",
                                 "tokenizer_config.json", "tokenizer.json", "model.safetensors.index.json"};
    for (int i = 0; i < 6 && !rc; i++)
        if (!plan_add(&p, small_names[i], e)) rc = e->code;

    /* weights */
    if (!rc) {
        c.tab = malloc(sizeof *c.tab);
        c.s.buf[0] = malloc(BUF_BYTES / 2 * 2);
        c.s.buf[1] = malloc(BUF_BYTES / 2 * 2);
        if (!c.tab || !c.s.buf[0] || !c.s.buf[1]) rc = pm_errf(e, PM_ENOMEM, "synth: out of memory");
        else gauss_table_init(c.tab);
    }
    if (!rc) {
        c.s.threaded = o->threads != 1;
        c.s.total = total;
        c.s.progress = o->progress;
        c.s.ud = o->progress_ud;
        pthread_mutex_init(&c.s.mu, NULL);
        pthread_cond_init(&c.s.cv, NULL);
        stream_ready = 1;
        if (c.s.threaded && pthread_create(&c.s.th, NULL, writer_main, &c.s)) c.s.threaded = 0;
    }
    tensor_ref *sorted = NULL;
    if (!rc) {
        sorted = malloc(sizeof *sorted * (size_t)(n ? n : 1));
        if (!sorted) rc = pm_errf(e, PM_ENOMEM, "synth: out of memory");
    }
    for (int s = 0; s < n_shards && !rc; s++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (refs[i].shard == s) sorted[m++] = refs[i];
        qsort(sorted, (size_t)m, sizeof *sorted, cmp_ref_name);
        rc = write_shard(&c, &p.files[s], sorted, m, e);
    }
    free(sorted);
    if (stream_ready) {
        if (c.s.threaded) {
            pthread_mutex_lock(&c.s.mu);
            c.s.quit = 1;
            pthread_cond_broadcast(&c.s.cv);
            pthread_mutex_unlock(&c.s.mu);
            pthread_join(c.s.th, NULL);
        }
        pthread_cond_destroy(&c.s.cv);
        pthread_mutex_destroy(&c.s.mu);
    }

    /* index */
    if (!rc) {
        json_t *wm = json_object();
        for (int i = 0; i < n; i++) {
            const char *fn = strrchr(p.files[refs[i].shard].final, '/') + 1;
            json_object_set_new(wm, ents[i].name, json_string(fn));
        }
        json_t *idx = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", wm);
        index_txt = idx ? json_dumps(idx, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
        json_decref(idx);
        if (!index_txt) rc = pm_errf(e, PM_ENOMEM, "synth: cannot serialise the index");
    }
    const char *small_texts[6] = {texts[0], texts[1], texts[2], texts[3], tok, index_txt};
    for (int i = 0; i < 6 && !rc; i++) rc = write_text_file(&p.files[n_shards + i], small_texts[i], e);

    /* publish: rename everything, then the marker */
    for (int i = 0; i < p.n_files && !rc; i++)
        if (rename(p.files[i].tmp, p.files[i].final))
            rc = pm_errf(e, PM_EIO, "%s: cannot rename to %s: %s", p.files[i].tmp, p.files[i].final, strerror(errno));
    if (!rc) {
        int dfd = open(o->out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    if (!rc) remove_stale(o->out_dir, &p);
    else
        for (int i = 0; i < p.n_files; i++) unlink(p.files[i].tmp);

    if (!rc) {
        res->n_tensors = n;
        res->n_shards = n_shards;
        res->n_vocab_tokens = c.n_vocab;
        res->total_bytes = total;
    }
    free(c.tab);
    free(c.s.buf[0]);
    free(c.s.buf[1]);
    free(p.files);
    free(refs);
    pm_ckpt_layout_free(ents);
    json_decref(cfg);
    free(tok);
    free(index_txt);
    for (int i = 0; i < 4; i++) free(texts[i]);
    return rc;
}
