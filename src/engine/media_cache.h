/* media_cache.h — encoder outputs of recent media, so that a request that sends the same image or
 * the same clips again (a chat client resends a conversation's media every turn) skips the
 * encoders: SigLIP over every crop, the Conformer, the projections.
 *
 * Keyed by the decoded input itself, as bytes the caller writes (an image's size and pixels; a
 * request's clips together, rates, lengths and samples, with the audio projection branch: the
 * Conformer runs a request's clips as one padded batch): a hash finds the candidate and the bytes
 * confirm it, so no input can pass for another. Exact: the encoders give the same bits for the same
 * input whatever the thread counts or what else runs (test_engine), so the rows kept are the rows a
 * new run computes. Thread-safe (a mutex): the prompt thread encodes while the steps run. */
#ifndef PM_MEDIA_CACHE_H
#define PM_MEDIA_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct pm_media_cache pm_media_cache;

/* At most cap_bytes of keys and rows; NULL when out of memory. */
pm_media_cache *pm_media_cache_new(int64_t cap_bytes);
void pm_media_cache_free(pm_media_cache *mc);

/* The rows kept for key[0, key_len): *rows (malloc'd copy, [n][hidden]) and the n_sizes per-item
 * token counts into sizes; returns n, 0 when none is kept, < 0 on error. */
int pm_media_cache_get(pm_media_cache *mc, const void *key, size_t key_len, int hidden, float **rows, int *sizes, int n_sizes, pm_err *e);
/* Keeps a copy of rows [n][hidden] and sizes under key (nothing when it does not fit the cap or
 * memory runs out; the least recently used entries go first). */
void pm_media_cache_put(pm_media_cache *mc, const void *key, size_t key_len, int hidden, const float *rows, int n, const int *sizes,
                        int n_sizes);

/* Lookups and hits so far, and the bytes held. */
void pm_media_cache_stats(pm_media_cache *mc, int64_t *lookups, int64_t *hits, int64_t *bytes);

#endif
