/* safetensors.c — see safetensors.h. Format: u64 little-endian header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets:[begin,end]}, "__metadata__": {...}}, then the data block. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct shard {
    char *path;
    uint8_t *map;
    size_t len;
} shard;

struct pm_weights {
    shard *shards;
    int n_shards;
    pm_tensor *t;      /* all tensors, sorted by name */
    int n;
    size_t total_bytes;
    void **copies;     /* aligned private copies of tensors the file stores misaligned (see add_shard) */
    int n_copies;
    int locked;        /* pm_weights_lock succeeded */
};

size_t pm_dtype_size(pm_dtype dt) { return dt == PM_DT_F32 ? 4 : dt == PM_DT_Q8 ? 1 : 2; }
const char *pm_dtype_name(pm_dtype dt) {
    return dt == PM_DT_F32 ? "F32" : dt == PM_DT_F16 ? "F16" : dt == PM_DT_Q8 ? "Q8" : "BF16";
}

static int parse_dtype(const char *s, pm_dtype *dt) {
    if (!strcmp(s, "BF16")) *dt = PM_DT_BF16;
    else if (!strcmp(s, "F16")) *dt = PM_DT_F16;
    else if (!strcmp(s, "F32")) *dt = PM_DT_F32;
    else return -1;
    return 0;
}

static int cmp_begin(const void *a, const void *b) {
    const pm_tensor *x = a, *y = b;
    const uint8_t *p = x->data, *q = y->data;
    return p < q ? -1 : p > q;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const pm_tensor *)a)->name, ((const pm_tensor *)b)->name);
}

void pm_safetensors_free_tensors(pm_tensor *t, int n) {
    if (!t) return;
    for (int i = 0; i < n; i++) free((char *)t[i].name);
    free(t);
}

int pm_safetensors_parse(const uint8_t *buf, size_t len, const char *what, pm_tensor **out, int *n_out, pm_err *e) {
    *out = NULL;
    *n_out = 0;
    if (len < 8) return pm_errf(e, PM_EFORMAT, "%s: file is %zu bytes, too short for a safetensors header", what, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > len - 8 || hlen > (100u << 20))
        return pm_errf(e, PM_EFORMAT, "%s: header length %llu exceeds the file (%zu bytes): truncated or not a safetensors file",
                       what, (unsigned long long)hlen, len);
    const uint8_t *data = buf + 8 + hlen;
    size_t dlen = len - 8 - hlen;
    json_error_t je;
    json_t *root = json_loadb((const char *)buf + 8, hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) return pm_errf(e, PM_EFORMAT, "%s: header JSON invalid at byte %d: %s", what, je.position, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return pm_errf(e, PM_EFORMAT, "%s: header is not a JSON object", what);
    }
    size_t cap = json_object_size(root);
    pm_tensor *t = calloc(cap ? cap : 1, sizeof *t);
    if (!t) {
        json_decref(root);
        return pm_errf(e, PM_ENOMEM, "%s: out of memory", what);
    }
    int n = 0, rc = PM_OK;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        pm_tensor *x = &t[n];
        const char *dts = NULL;
        json_t *shape = NULL, *offs = NULL;
        if (!json_is_object(val) || json_unpack(val, "{s:s, s:o, s:o}", "dtype", &dts, "shape", &shape, "data_offsets", &offs)) {
            rc = pm_errf(e, PM_EFORMAT, "%s: tensor '%s' lacks dtype/shape/data_offsets", what, key);
            break;
        }
        if (parse_dtype(dts, &x->dtype)) {
            rc = pm_errf(e, PM_EUNSUPPORTED, "%s: tensor '%s' has dtype %s (supported: BF16, F16, F32)", what, key, dts);
            break;
        }
        if (!json_is_array(shape) || json_array_size(shape) > PM_MAX_DIMS) {
            rc = pm_errf(e, PM_EFORMAT, "%s: tensor '%s' shape is not an array of at most %d dims", what, key, PM_MAX_DIMS);
            break;
        }
        x->ndim = (int)json_array_size(shape);
        int64_t numel = 1;
        for (int d = 0; d < x->ndim; d++) {
            json_t *v = json_array_get(shape, d);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > ((int64_t)1 << 40)) {
                rc = pm_errf(e, PM_EFORMAT, "%s: tensor '%s' dim %d is not a sane non-negative integer", what, key, d);
                break;
            }
            x->shape[d] = json_integer_value(v);
            if (x->shape[d] && numel > ((int64_t)1 << 50) / x->shape[d]) {
                rc = pm_errf(e, PM_EFORMAT, "%s: tensor '%s' shape product overflows", what, key);
                break;
            }
            numel *= x->shape[d];
        }
        if (rc) break;
        x->numel = numel;
        json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
        if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) || !json_is_integer(en)) {
            rc = pm_errf(e, PM_EFORMAT, "%s: tensor '%s' data_offsets is not [begin, end]", what, key);
            break;
        }
        json_int_t ob = json_integer_value(b), oe = json_integer_value(en);
        if (ob < 0 || oe < ob || (uint64_t)oe > dlen) {
            rc = pm_errf(e, PM_EFORMAT, "%s: tensor '%s' data_offsets [%lld, %lld] outside the %zu-byte data block (truncated file?)",
                         what, key, (long long)ob, (long long)oe, dlen);
            break;
        }
        x->nbytes = (size_t)(oe - ob);
        if ((uint64_t)numel * pm_dtype_size(x->dtype) != x->nbytes) {
            rc = pm_errf(e, PM_EFORMAT, "%s: tensor '%s' holds %zu bytes but its shape and dtype %s need %llu", what, key,
                         x->nbytes, dts, (unsigned long long)numel * pm_dtype_size(x->dtype));
            break;
        }
        x->data = data + ob;
        x->name = strdup(key);
        if (!x->name) {
            rc = pm_errf(e, PM_ENOMEM, "out of memory");
            break;
        }
        n++;
    }
    json_decref(root);
    if (!rc && n > 1) {
        qsort(t, (size_t)n, sizeof *t, cmp_begin);
        for (int i = 1; i < n; i++) {
            const uint8_t *pe = (const uint8_t *)t[i - 1].data + t[i - 1].nbytes;
            if ((const uint8_t *)t[i].data < pe) {
                rc = pm_errf(e, PM_EFORMAT, "%s: tensors '%s' and '%s' overlap in the data block", what, t[i - 1].name, t[i].name);
                break;
            }
        }
    }
    if (rc) {
        pm_safetensors_free_tensors(t, n);
        return rc;
    }
    *out = t;
    *n_out = n;
    return PM_OK;
}

static int map_file(const char *path, shard *s, pm_err *e) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return pm_errf(e, PM_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return pm_errf(e, PM_EIO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pm_errf(e, PM_EIO, "%s: not a regular file", path);
    }
    s->len = (size_t)st.st_size;
    if (s->len == 0) {
        close(fd);
        return pm_errf(e, PM_EFORMAT, "%s: file is empty", path);
    }
    void *m = mmap(NULL, s->len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return pm_errf(e, PM_EIO, "%s: cannot mmap: %s", path, strerror(errno));
    s->map = m;
    s->path = strdup(path);
    if (!s->path) return pm_errf(e, PM_ENOMEM, "out of memory");
    return PM_OK;
}

int pm_weights_lock(pm_weights *w, pm_err *e) {
    for (int i = 0; i < w->n_shards; i++)
        if (mlock(w->shards[i].map, w->shards[i].len)) {
            int err = errno;
            struct rlimit rl = {0, 0};
            char lim[64] = "unlimited";
            if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
                snprintf(lim, sizeof lim, "%.1f MB", (double)rl.rlim_cur / 1e6);
            return pm_errf(e, PM_ELIMIT,
                           "%s: cannot lock its %.1f MB in memory (--mlock): %s; the limit of locked memory is %s (ulimit -l; "
                           "or run without --mlock)",
                           w->shards[i].path, (double)w->shards[i].len / 1e6, strerror(err), lim);
        }
    w->locked = 1;
    return PM_OK;
}

/* Bytes of the mapping at `base` that the kernel maps with 2 MB entries (FilePmdMapped of its
 * /proc/self/smaps block); 0 where that file is unreadable. */
static size_t pmd_mapped_bytes(const void *base) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char line[512];
    int in = 0;
    size_t kb = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) in = lo == (uintptr_t)base;
        else if (in && sscanf(line, "FilePmdMapped: %zu kB", &kb) == 1) break;
    }
    fclose(f);
    return kb * 1024;
}

int pm_file_recache(const char *path, int evict, size_t *bytes, size_t *huge_bytes, pm_err *e) {
    *bytes = *huge_bytes = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return pm_errf(e, PM_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int err = errno;
        close(fd);
        return pm_errf(e, PM_EIO, "%s: cannot stat: %s", path, strerror(err));
    }
    if (st.st_size == 0) {
        close(fd);
        return pm_errf(e, PM_EIO, "%s: file is empty", path);
    }
    size_t len = (size_t)st.st_size;
    if (evict) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* drops only the pages nobody maps */
    uint8_t *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return pm_errf(e, PM_EIO, "%s: cannot mmap: %s", path, strerror(errno));
    madvise(m, len, MADV_HUGEPAGE);
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < len; i += 4096) sink ^= m[i];
    (void)sink;
    *bytes = len;
    *huge_bytes = pmd_mapped_bytes(m);
    munmap(m, len);
    return PM_OK;
}

int pm_weights_recache(const pm_weights *w, int evict, size_t *bytes, size_t *huge_bytes, pm_err *e) {
    *bytes = *huge_bytes = 0;
    for (int i = 0; i < w->n_shards; i++) {
        size_t b, h;
        if (pm_file_recache(w->shards[i].path, evict, &b, &h, e)) return e->code;
        *bytes += b, *huge_bytes += h;
    }
    return PM_OK;
}

void pm_weights_unmap_resident(pm_weights *w) {
    if (!w || w->locked) return;
    for (int i = 0; i < w->n_shards; i++) madvise(w->shards[i].map, w->shards[i].len, MADV_DONTNEED);
}

void pm_weights_release(const pm_weights *w, const pm_tensor *t) {
    if (!w || !t || t->shard < 0 || t->shard >= w->n_shards) return;
    const shard *s = &w->shards[t->shard];
    uintptr_t a = (uintptr_t)t->data, lo = (uintptr_t)s->map;
    if (a < lo || a + t->nbytes > lo + s->len) return; /* a private copy, not the mapping */
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), b = (a + pg - 1) & ~(pg - 1), end = (a + t->nbytes) & ~(pg - 1);
    if (end > b) {
        munlock((void *)b, end - b); /* MADV_DONTNEED refuses locked pages (--mlock) */
        madvise((void *)b, end - b, MADV_DONTNEED);
    }
}

void pm_weights_close(pm_weights *w) {
    if (!w) return;
    pm_safetensors_free_tensors(w->t, w->n);
    for (int i = 0; i < w->n_shards; i++) {
        if (w->shards[i].map) munmap(w->shards[i].map, w->shards[i].len);
        free(w->shards[i].path);
    }
    free(w->shards);
    for (int i = 0; i < w->n_copies; i++) free(w->copies[i]);
    free(w->copies);
    free(w);
}

/* The format does not require alignment: a header whose length is not a multiple of the element
 * size (or an odd-sized tensor before a wider one) leaves tensor data at an address the kernels may
 * not read as uint16_t/float (undefined behaviour; vectorised loads may fault). Such tensors get an
 * aligned private copy (empty ones point at an aligned dummy); files written by the safetensors
 * library (8-byte padded header) never need a copy. */
static int align_tensors(pm_weights *w, pm_tensor *t, int n, pm_err *e) {
    static const max_align_t empty; /* where empty tensors point: aligned, never read */
    for (int i = 0; i < n; i++) {
        if (!t[i].nbytes) t[i].data = &empty;
        if ((uintptr_t)t[i].data % pm_dtype_size(t[i].dtype) == 0) continue;
        void **nc = realloc(w->copies, (size_t)(w->n_copies + 1) * sizeof *nc);
        if (!nc) return pm_errf(e, PM_ENOMEM, "out of memory");
        w->copies = nc;
        void *c = malloc(t[i].nbytes);
        if (!c) return pm_errf(e, PM_ENOMEM, "out of memory copying misaligned tensor '%s'", t[i].name);
        memcpy(c, t[i].data, t[i].nbytes);
        w->copies[w->n_copies++] = c;
        t[i].data = c;
    }
    return PM_OK;
}

/* Transparent huge pages for the mapping: where the page cache reads a shard in through it
 * (nothing cached yet), it reads 2 MB folios, which the kernel then maps one PMD each (ext4, xfs
 * and tmpfs cache files in large folios on recent kernels; elsewhere this changes nothing). A
 * decode step streams gigabytes through these mappings. Measured on the full-size synthetic
 * checkpoint (Zen 5 VM, 2 threads, 20 passes of every GEMV of a batch-1 step): cached in 2 MB
 * folios 0.113-0.115 s per pass on average, in the 4 KB ones an earlier read() had left
 * 0.135-0.137 s; the best passes equal (0.104-0.107 s): what differs are the passes that a kernel
 * thread sampling page-table accessed bits every 0.5 s (DAMON) met, 30-90 ms slower on 4 KB
 * entries. Advising only the big tensors, 4 KB entries around them, measured 0.125-0.154 s.
 * Advice only: a failure changes nothing. */
static void advise_pages(const shard *s) { madvise(s->map, s->len, MADV_HUGEPAGE); }

static int add_shard(pm_weights *w, const char *path, pm_err *e) {
    shard *ns = realloc(w->shards, (size_t)(w->n_shards + 1) * sizeof *ns);
    if (!ns) return pm_errf(e, PM_ENOMEM, "out of memory");
    w->shards = ns;
    shard *s = &w->shards[w->n_shards];
    memset(s, 0, sizeof *s);
    int rc = map_file(path, s, e);
    if (rc) return rc;
    w->n_shards++;
    pm_tensor *t;
    int n;
    rc = pm_safetensors_parse(s->map, s->len, path, &t, &n, e);
    if (rc) return rc;
    if ((rc = align_tensors(w, t, n, e))) {
        pm_safetensors_free_tensors(t, n);
        return rc;
    }
    advise_pages(s);
    pm_tensor *all = realloc(w->t, (size_t)(w->n + n) * sizeof *all);
    if (!all) {
        pm_safetensors_free_tensors(t, n);
        return pm_errf(e, PM_ENOMEM, "out of memory");
    }
    w->t = all;
    for (int i = 0; i < n; i++) {
        t[i].shard = w->n_shards - 1;
        w->t[w->n + i] = t[i];
        w->total_bytes += t[i].nbytes;
    }
    w->n += n;
    free(t); /* names now owned by w->t */
    return PM_OK;
}

int pm_weights_open(pm_weights **out, const char *dir, pm_err *e) {
    *out = NULL;
    pm_weights *w = calloc(1, sizeof *w);
    if (!w) return pm_errf(e, PM_ENOMEM, "out of memory");
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    int rc = PM_OK;
    json_t *index = NULL;
    if (access(path, F_OK) == 0) {
        json_error_t je;
        index = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        json_t *wm = index ? json_object_get(index, "weight_map") : NULL;
        if (!index) rc = pm_errf(e, PM_EFORMAT, "%s: invalid JSON at line %d column %d: %s", path, je.line, je.column, je.text);
        else if (!json_is_object(wm)) rc = pm_errf(e, PM_EFORMAT, "%s: no \"weight_map\" object", path);
        /* Open each distinct shard once, in order of first appearance. */
        const char *name;
        json_t *fv;
        if (!rc) json_object_foreach(wm, name, fv) {
            if (!json_is_string(fv) || strchr(json_string_value(fv), '/')) {
                rc = pm_errf(e, PM_EFORMAT, "%s: weight_map entry '%s' is not a plain file name", path, name);
                break;
            }
            char sp[4096];
            snprintf(sp, sizeof sp, "%s/%s", dir, json_string_value(fv));
            int seen = 0;
            for (int i = 0; i < w->n_shards; i++) seen |= !strcmp(w->shards[i].path, sp);
            if (!seen && (rc = add_shard(w, sp, e))) {
                if (e->code == PM_EIO) pm_err_ctx(e, "shard listed in model.safetensors.index.json is missing or unreadable: ");
                break;
            }
        }
        if (!rc && w->n_shards == 0) rc = pm_errf(e, PM_EFORMAT, "%s: weight_map is empty", path);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (access(path, F_OK) != 0)
            rc = pm_errf(e, PM_EIO, "%s: neither model.safetensors.index.json nor model.safetensors exists", dir);
        else rc = add_shard(w, path, e);
    }
    if (!rc) {
        qsort(w->t, (size_t)w->n, sizeof *w->t, cmp_name);
        for (int i = 1; i < w->n; i++)
            if (!strcmp(w->t[i].name, w->t[i - 1].name)) {
                rc = pm_errf(e, PM_EFORMAT, "tensor '%s' appears in two shards (%s and %s)", w->t[i].name,
                             w->shards[w->t[i - 1].shard].path, w->shards[w->t[i].shard].path);
                break;
            }
    }
    if (!rc && index) {
        /* Index and shards must agree exactly. */
        json_t *wm = json_object_get(index, "weight_map");
        const char *name;
        json_t *fv;
        json_object_foreach(wm, name, fv) {
            const pm_tensor *t = pm_weights_find(w, name);
            if (!t) {
                rc = pm_errf(e, PM_EFORMAT, "tensor '%s' is listed in model.safetensors.index.json (in %s) but absent from that shard", name,
                             json_string_value(fv));
                break;
            }
            const char *sp = w->shards[t->shard].path, *base = strrchr(sp, '/');
            if (strcmp(base ? base + 1 : sp, json_string_value(fv))) {
                rc = pm_errf(e, PM_EFORMAT, "tensor '%s': index says %s but it is stored in %s", name, json_string_value(fv), sp);
                break;
            }
        }
        if (!rc && (size_t)w->n != json_object_size(wm)) {
            for (int i = 0; i < w->n; i++)
                if (!json_object_get(wm, w->t[i].name)) {
                    rc = pm_errf(e, PM_EFORMAT, "tensor '%s' is stored in %s but not listed in model.safetensors.index.json", w->t[i].name,
                                 w->shards[w->t[i].shard].path);
                    break;
                }
        }
    }
    json_decref(index);
    if (rc) {
        pm_weights_close(w);
        return rc;
    }
    *out = w;
    return PM_OK;
}

int pm_weights_count(const pm_weights *w) { return w->n; }
const pm_tensor *pm_weights_at(const pm_weights *w, int i) { return &w->t[i]; }
size_t pm_weights_total_bytes(const pm_weights *w) { return w->total_bytes; }
int pm_weights_num_shards(const pm_weights *w) { return w->n_shards; }
const char *pm_weights_shard_path(const pm_weights *w, int shard) { return w->shards[shard].path; }

const pm_tensor *pm_weights_find(const pm_weights *w, const char *name) {
    int lo = 0, hi = w->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(w->t[mid].name, name);
        if (!c) return &w->t[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++) o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static const pm_tensor *wget_v(pm_weights *w, pm_err *e, int optional, int ndim, const int64_t *shape, const char *fmt, va_list ap) {
    if (e && e->code) return NULL;
    char name[512];
    vsnprintf(name, sizeof name, fmt, ap);
    pm_tensor *t = (pm_tensor *)pm_weights_find(w, name);
    if (!t) {
        if (!optional) pm_errf(e, PM_EFORMAT, "missing tensor '%s'", name);
        return NULL;
    }
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[128], got[128];
        shape_str(want, sizeof want, ndim, shape);
        shape_str(got, sizeof got, t->ndim, t->shape);
        pm_errf(e, PM_EFORMAT, "tensor '%s' in %s has shape %s, config.json implies %s", name, w->shards[t->shard].path, got, want);
        return NULL;
    }
    t->consumed = 1;
    return t;
}

const pm_tensor *pm_wget(pm_weights *w, pm_err *e, int ndim, const int64_t *shape, const char *namefmt, ...) {
    va_list ap;
    va_start(ap, namefmt);
    const pm_tensor *t = wget_v(w, e, 0, ndim, shape, namefmt, ap);
    va_end(ap);
    return t;
}

const pm_tensor *pm_wget_opt(pm_weights *w, pm_err *e, int ndim, const int64_t *shape, const char *namefmt, ...) {
    va_list ap;
    va_start(ap, namefmt);
    const pm_tensor *t = wget_v(w, e, 1, ndim, shape, namefmt, ap);
    va_end(ap);
    return t;
}

int pm_weights_mark_bf16_dot(pm_weights *w) {
    int n = 0;
    for (int i = 0; i < w->n; i++)
        if (w->t[i].dtype == PM_DT_BF16 && w->t[i].ndim >= 2) w->t[i].bf16_dot = 1, n++; /* conv kernels too: modules view them as matrices */
    return n;
}

int pm_weights_check_consumed(const pm_weights *w, pm_err *e) {
    int unused = 0;
    char list[700] = "";
    size_t o = 0;
    for (int i = 0; i < w->n; i++) {
        if (w->t[i].consumed) continue;
        if (unused < 4 && o < sizeof list - 1) o += (size_t)snprintf(list + o, sizeof list - o, "%s'%s'", unused ? ", " : "", w->t[i].name);
        unused++;
    }
    if (unused) return pm_errf(e, PM_EFORMAT, "%d tensor(s) in the checkpoint are not used by this model (unknown or inconsistent with config.json): %s%s",
                               unused, list, unused > 4 ? ", ..." : "");
    return PM_OK;
}
