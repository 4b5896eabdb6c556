/* media_cache.c — see media_cache.h. A few entries (a conversation's images and clips), compared
 * linearly by hash, then byte for byte. */
#include "media_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"

enum { MAX_ENTRIES = 32 };

typedef struct entry {
    uint64_t hash;
    void *key;
    size_t key_len;
    float *rows;
    int n, hidden, n_sizes;
    int *sizes;
    int64_t bytes;
    uint64_t used;
} entry;

struct pm_media_cache {
    pthread_mutex_t mu;
    entry e[MAX_ENTRIES];
    int n;
    int64_t bytes, cap, lookups, hits;
    uint64_t clock;
};

pm_media_cache *pm_media_cache_new(int64_t cap_bytes) {
    pm_media_cache *mc = calloc(1, sizeof *mc);
    if (!mc) return NULL;
    pthread_mutex_init(&mc->mu, NULL);
    mc->cap = cap_bytes;
    return mc;
}

static void drop(pm_media_cache *mc, int i) {
    entry *x = &mc->e[i];
    mc->bytes -= x->bytes;
    free(x->key);
    free(x->rows);
    free(x->sizes);
    mc->e[i] = mc->e[--mc->n];
}

void pm_media_cache_free(pm_media_cache *mc) {
    if (!mc) return;
    while (mc->n) drop(mc, mc->n - 1);
    pthread_mutex_destroy(&mc->mu);
    free(mc);
}

static int find(const pm_media_cache *mc, uint64_t h, const void *key, size_t key_len, int hidden, int n_sizes) {
    for (int i = 0; i < mc->n; i++) {
        const entry *x = &mc->e[i];
        if (x->hash == h && x->key_len == key_len && x->hidden == hidden && x->n_sizes == n_sizes && !memcmp(x->key, key, key_len)) return i;
    }
    return -1;
}

int pm_media_cache_get(pm_media_cache *mc, const void *key, size_t key_len, int hidden, float **rows, int *sizes, int n_sizes, pm_err *e) {
    if (!mc) return 0;
    uint64_t h = pm_hash_bytes(key, key_len);
    pthread_mutex_lock(&mc->mu);
    mc->lookups++;
    int i = find(mc, h, key, key_len, hidden, n_sizes), n = 0;
    if (i >= 0) {
        entry *x = &mc->e[i];
        if ((*rows = pm_malloc(sizeof(float) * (size_t)x->n * hidden, e))) {
            memcpy(*rows, x->rows, sizeof(float) * (size_t)x->n * hidden);
            memcpy(sizes, x->sizes, sizeof(int) * (size_t)n_sizes);
            x->used = ++mc->clock;
            mc->hits++;
            n = x->n;
        } else n = e->code;
    }
    pthread_mutex_unlock(&mc->mu);
    return n;
}

void pm_media_cache_put(pm_media_cache *mc, const void *key, size_t key_len, int hidden, const float *rows, int n, const int *sizes,
                        int n_sizes) {
    if (!mc || n <= 0) return;
    int64_t bytes = (int64_t)key_len + (int64_t)sizeof(float) * n * hidden + (int64_t)sizeof(int) * n_sizes;
    if (bytes > mc->cap) return;
    entry x = {pm_hash_bytes(key, key_len), malloc(key_len ? key_len : 1), key_len, malloc(sizeof(float) * (size_t)n * hidden), n, hidden,
               n_sizes, malloc(sizeof(int) * (size_t)(n_sizes ? n_sizes : 1)), bytes, 0};
    if (!x.key || !x.rows || !x.sizes) {
        free(x.key);
        free(x.rows);
        free(x.sizes);
        return;
    }
    memcpy(x.key, key, key_len);
    memcpy(x.rows, rows, sizeof(float) * (size_t)n * hidden);
    memcpy(x.sizes, sizes, sizeof(int) * (size_t)n_sizes);
    pthread_mutex_lock(&mc->mu);
    int i = find(mc, x.hash, key, key_len, hidden, n_sizes);
    if (i >= 0) drop(mc, i); /* the same input, encoded beside: the newer copy stays */
    while (mc->n && (mc->n == MAX_ENTRIES || mc->bytes + bytes > mc->cap)) {
        int lru = 0;
        for (int k = 1; k < mc->n; k++)
            if (mc->e[k].used < mc->e[lru].used) lru = k;
        drop(mc, lru);
    }
    x.used = ++mc->clock;
    mc->e[mc->n++] = x;
    mc->bytes += bytes;
    pthread_mutex_unlock(&mc->mu);
}

void pm_media_cache_stats(pm_media_cache *mc, int64_t *lookups, int64_t *hits, int64_t *bytes) {
    *lookups = *hits = *bytes = 0;
    if (!mc) return;
    pthread_mutex_lock(&mc->mu);
    *lookups = mc->lookups;
    *hits = mc->hits;
    *bytes = mc->bytes;
    pthread_mutex_unlock(&mc->mu);
}
