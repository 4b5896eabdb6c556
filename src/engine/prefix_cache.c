/* prefix_cache.c — see prefix_cache.h. A few entries (a conversation or two, a system prompt),
 * so lookups compare keys linearly. */
#include "prefix_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tok/chat.h"
#include "util/hash.h"

enum { MAX_ENTRIES = 64 };

typedef struct entry {
    uint64_t *keys;
    float *media;     /* the media positions' rows, in order [n_media][hidden]: a key match is checked on them */
    int len, adapter, rope_long, bf16, hidden;
    char salt[PM_MAX_CACHE_SALT + 1]; /* the requests' cache_salt ("" none): only the same one reuses it */
    pm_kv_cache kv;   /* pages [0, ceil(len / PM_KV_PAGE)) */
    int64_t bytes;
    uint64_t used;    /* the cache's clock when last put or taken */
} entry;

struct pm_prefix_cache {
    pthread_mutex_t mu;
    entry e[MAX_ENTRIES];
    int n;
    int64_t bytes, cap;
    uint64_t clock;
    int64_t lookups, hits, reused;
};

pm_prefix_cache *pm_prefix_cache_new(int64_t cap_bytes) {
    pm_prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pthread_mutex_init(&pc->mu, NULL);
    pc->cap = cap_bytes;
    return pc;
}

static void drop(pm_prefix_cache *pc, int i) {
    entry *x = &pc->e[i];
    pc->bytes -= x->bytes;
    pm_kv_free(&x->kv);
    free(x->keys);
    free(x->media);
    pc->e[i] = pc->e[--pc->n];
}

void pm_prefix_cache_free(pm_prefix_cache *pc) {
    if (!pc) return;
    while (pc->n) drop(pc, pc->n - 1);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

/* A row's hash with the top bit set, so that no token id equals it: a quick filter; a match is
 * confirmed on the rows themselves (common). */
static uint64_t row_hash(const float *row, int n) { return pm_hash_bytes(row, sizeof(float) * (size_t)n) | 1ull << 63; }

int pm_prefix_keys(const pm_prepared *prep, int n, int hidden, uint64_t **out, pm_err *e) {
    uint64_t *k = pm_malloc(sizeof *k * (size_t)(n > 0 ? n : 1), e);
    if (!k) return e->code;
    for (int p = 0; p < n; p++) {
        int32_t id = prep->ids[p];
        int media = id == PM_TOK_IMAGE_ID || id == PM_TOK_AUDIO_ID;
        if (media && !prep->embeds) {
            free(k);
            return pm_errf(e, PM_ESTATE, "prefix keys: the media rows are gone");
        }
        k[p] = media ? row_hash(prep->embeds + (size_t)p * hidden, hidden) : (uint64_t)(uint32_t)id;
    }
    *out = k;
    return PM_OK;
}

static int is_media(uint64_t key) { return key >> 63 != 0; }

/* An entry serves a prompt under the same adapter, RoPE factors, K/V element type and salt. */
static int same_scope(const entry *x, int adapter, int rope_long, int bf16, const char *salt) {
    return x->adapter == adapter && x->rope_long == rope_long && x->bf16 == bf16 && !strcmp(x->salt, salt ? salt : "");
}

/* How many leading positions x and the prompt (keys, its rows `rows` [n][hidden], NULL to compare
 * keys alone) share: equal keys, and at media positions equal rows. */
static int common(const entry *x, const uint64_t *keys, const float *rows, int n) {
    int m = x->len < n ? x->len : n, i = 0;
    size_t mi = 0, hb = sizeof(float) * (size_t)x->hidden;
    for (; i < m && x->keys[i] == keys[i]; i++)
        if (is_media(keys[i]) && rows && memcmp(x->media + mi++ * x->hidden, rows + (size_t)i * x->hidden, hb)) break;
    return i;
}

/* Positions [0, len) of src into dst (reserved for them): whole pages at once, the last one's runs
 * (one per layer, K / V and head) up to len. */
static void copy_positions(pm_kv_cache *dst, const pm_kv_cache *src, int len) {
    size_t runs = (size_t)src->n_layers * 2 * (size_t)src->n_heads;
    size_t pos_bytes = src->page_bytes / (runs * PM_KV_PAGE); /* one position of one run */
    for (int p = 0; p * PM_KV_PAGE < len; p++) {
        int in_page = len - p * PM_KV_PAGE;
        if (in_page >= PM_KV_PAGE) {
            memcpy(dst->pages[p], src->pages[p], src->page_bytes);
            continue;
        }
        for (size_t r = 0; r < runs; r++)
            memcpy((char *)dst->pages[p] + r * PM_KV_PAGE * pos_bytes, (const char *)src->pages[p] + r * PM_KV_PAGE * pos_bytes,
                   (size_t)in_page * pos_bytes);
    }
}

int pm_prefix_cache_put(pm_prefix_cache *pc, uint64_t *keys, const float *rows, int hidden, int len, int adapter, int rope_long,
                        const char *salt, pm_kv_cache *kv, const pm_llm_config *copy) {
    if (!salt) salt = "";
    if (!pc || len <= 0 || kv->len < len || strlen(salt) > PM_MAX_CACHE_SALT) return 0;
    int pages = (len + PM_KV_PAGE - 1) / PM_KV_PAGE, n_media = 0;
    for (int i = 0; i < len; i++) n_media += is_media(keys[i]);
    int64_t bytes = (int64_t)pages * (int64_t)kv->page_bytes + (int64_t)n_media * hidden * (int64_t)sizeof(float);
    if (bytes > pc->cap) return 0;
    float *media = n_media ? malloc(sizeof(float) * (size_t)n_media * hidden) : NULL;
    if (n_media && !media) return 0;
    for (int i = 0, k = 0; i < len; i++)
        if (is_media(keys[i])) memcpy(media + (size_t)k++ * hidden, rows + (size_t)i * hidden, sizeof(float) * hidden);
    pthread_mutex_lock(&pc->mu);
    int kept = 0;
    for (int i = 0; i < pc->n; i++) { /* one that holds all of it already: keep that one */
        entry *x = &pc->e[i];
        if (same_scope(x, adapter, rope_long, kv->bf16, salt) && x->len >= len && common(x, keys, rows, len) == len) {
            x->used = ++pc->clock;
            goto out;
        }
    }
    for (int i = pc->n - 1; i >= 0; i--) { /* ones it holds all of go */
        entry *x = &pc->e[i];
        if (same_scope(x, adapter, rope_long, kv->bf16, salt) && x->len <= len && common(x, keys, rows, len) == x->len)
            drop(pc, i);
    }
    while (pc->n && (pc->n == MAX_ENTRIES || pc->bytes + bytes > pc->cap)) { /* the least recently used go */
        int lru = 0;
        for (int i = 1; i < pc->n; i++)
            if (pc->e[i].used < pc->e[lru].used) lru = i;
        drop(pc, lru);
    }
    pm_kv_cache held = {0};
    if (copy) { /* the sequence goes on with its own */
        pm_err e = {0};
        held.bf16 = kv->bf16;
        if (pm_kv_reserve(&held, copy, len, &e)) {
            pm_kv_free(&held);
            goto out;
        }
        copy_positions(&held, kv, len);
        held.len = len;
    } else {
        for (int p = pages; p < kv->n_pages; p++) munmap(kv->pages[p], kv->page_bytes);
        kv->n_pages = pages;
        if (kv->n_huge > pages) kv->n_huge = pages;
        kv->cap = pages * PM_KV_PAGE;
        kv->len = len;
        held = *kv;
        memset(kv, 0, sizeof *kv);
    }
    entry *x = &pc->e[pc->n++];
    x->keys = keys;
    x->media = media;
    media = NULL;
    x->hidden = hidden;
    x->len = len;
    x->adapter = adapter;
    x->rope_long = rope_long;
    x->bf16 = kv->bf16;
    strcpy(x->salt, salt);
    x->kv = held;
    x->bytes = bytes;
    x->used = ++pc->clock;
    pc->bytes += bytes;
    kept = 1;
out:
    pthread_mutex_unlock(&pc->mu);
    free(media);
    return kept;
}

int pm_prefix_cache_take(pm_prefix_cache *pc, const uint64_t *keys, const float *rows, int n, const int *bounds, int n_bounds, int adapter,
                         int rope_long, const char *salt, const pm_llm_config *c, pm_kv_cache *dst, pm_err *e) {
    if (!pc) return 0;
    pthread_mutex_lock(&pc->mu);
    pc->lookups++;
    int best = -1, best_len = 0;
    for (int i = 0; i < pc->n; i++) {
        entry *x = &pc->e[i];
        if (!same_scope(x, adapter, rope_long, dst->bf16, salt)) continue;
        int l = common(x, keys, rows, n), k = n_bounds;
        while (k > 0 && bounds[k - 1] > l) k--;
        l = k > 0 ? bounds[k - 1] : 0; /* where the prompt's own chunks would have ended */
        if (l > best_len) {
            best = i;
            best_len = l;
        }
    }
    int rc = 0;
    if (best >= 0) {
        entry *x = &pc->e[best];
        if (!(rc = pm_kv_reserve(dst, c, best_len, e))) {
            copy_positions(dst, &x->kv, best_len);
            dst->len = best_len;
            x->used = ++pc->clock;
            pc->hits++;
            pc->reused += best_len;
            rc = best_len;
        }
    }
    pthread_mutex_unlock(&pc->mu);
    return rc;
}

void pm_prefix_cache_stats(pm_prefix_cache *pc, pm_prefix_stats *st) {
    memset(st, 0, sizeof *st);
    if (!pc) return;
    pthread_mutex_lock(&pc->mu);
    st->lookups = pc->lookups;
    st->hits = pc->hits;
    st->reused = pc->reused;
    st->bytes = pc->bytes;
    st->cap = pc->cap;
    st->entries = pc->n;
    pthread_mutex_unlock(&pc->mu);
}
