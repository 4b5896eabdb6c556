/* safetensors.h — read-only, zero-copy access to a Hugging Face checkpoint's weights.
 *
 * Opens `model.safetensors`, or the shards named by `model.safetensors.index.json`, mmaps each file,
 * validates every header (JSON shape, dtypes, offsets in bounds, sizes = shape product x dtype size,
 * no overlapping tensors, index <-> shard agreement) and exposes each tensor as a pm_tensor whose
 * data points into the mapping. Nothing is copied or converted: RSS grows only with what is touched.
 * Model code fetches tensors with pm_wget(), which checks the shape and marks the tensor consumed;
 * pm_weights_check_consumed() then turns any tensor nobody asked for into a load error. */
#ifndef PM_SAFETENSORS_H
#define PM_SAFETENSORS_H

#include <stdint.h>
#include <stddef.h>
#include "../util/err.h"

/* PM_DT_Q8 never comes from a file: it is the opt-in int8 form of a bf16 weight (nn/quant.h),
 * block-scaled int8 in packed 4-row records; nbytes is the packed size. */
typedef enum pm_dtype { PM_DT_F32 = 0, PM_DT_F16 = 1, PM_DT_BF16 = 2, PM_DT_Q8 = 3 } pm_dtype;

#define PM_MAX_DIMS 6

typedef struct pm_tensor {
    const char *name;
    pm_dtype dtype;
    int ndim;
    int64_t shape[PM_MAX_DIMS];
    int64_t numel;
    const void *data;   /* points into the mmap'd shard (Q8: owned packed copy) */
    size_t nbytes;
    int shard;          /* index into the shard list, for messages */
    int consumed;       /* set by pm_wget */
    const uint16_t *gemm_pack; /* NULL, or W as GEMM-ready slivers (pm_kern_gemm_pack), owned by the model
                                  that made it; pm_linear then always takes the GEMM */
    int bf16_dot;       /* 1: products of many rows round x to bf16 and multiply bf16 pairs (opt-in
                           --compute bf16; nn/gemm_dot.c), where the CPU has AVX512-BF16 */
} pm_tensor;

typedef struct pm_weights pm_weights;

size_t pm_dtype_size(pm_dtype dt);
const char *pm_dtype_name(pm_dtype dt);

/* Opens the weights of checkpoint directory `dir`. */
int pm_weights_open(pm_weights **out, const char *dir, pm_err *e);
/* Locks every shard's mapping in memory (mlock: reads it in); PM_ELIMIT with the size and the
 * limit when the system refuses. pm_weights_release unlocks what it gives back. */
int pm_weights_lock(pm_weights *w, pm_err *e);
void pm_weights_close(pm_weights *w);

int pm_weights_count(const pm_weights *w);
const pm_tensor *pm_weights_at(const pm_weights *w, int i);
size_t pm_weights_total_bytes(const pm_weights *w);
int pm_weights_num_shards(const pm_weights *w);
const char *pm_weights_shard_path(const pm_weights *w, int shard);

/* Looks a tensor up by exact name (no shape check, not marked consumed). NULL if absent. */
const pm_tensor *pm_weights_find(const pm_weights *w, const char *name);

/* Fetches the tensor named by printf-format `namefmt`, checks that it has `ndim` dims equal to
 * `shape`, marks it consumed. On a missing tensor or wrong shape records an error naming the tensor,
 * its shard and both shapes, and returns NULL. If `e` already holds an error, returns NULL at once,
 * so a module loader can fetch everything and check `e->code` once. */
const pm_tensor *pm_wget(pm_weights *w, pm_err *e, int ndim, const int64_t *shape, const char *namefmt, ...)
    PM_PRINTF(5, 6);

/* Same, but an absent tensor is not an error (returns NULL, e untouched). Shape is still checked. */
const pm_tensor *pm_wget_opt(pm_weights *w, pm_err *e, int ndim, const int64_t *shape, const char *namefmt, ...)
    PM_PRINTF(5, 6);

/* Tells the kernel that t's bytes will not be read again (its int8 copy replaced it): the whole
 * pages inside t's range of the read-only file mapping leave the resident set (MADV_DONTNEED; the
 * file stays intact and a later read would fault them back in). No-op for private copies. */
void pm_weights_release(const pm_weights *w, const pm_tensor *t);

/* Unmaps every page of the shards' mappings (MADV_DONTNEED; the page cache keeps them): what the
 * load itself read (headers, the norms and tables it copied) leaves the resident set, and a tensor
 * read later faults back in on first use. The page cache may hold a shard in 2 MB folios, which
 * the kernel maps whole on a fault: ~0.7 GB of the full checkpoint stayed resident after a load
 * that had copied only small tensors. No-op once pm_weights_lock has locked the mapping. */
void pm_weights_unmap_resident(pm_weights *w);

/* Reads file `path` into the page cache through a MADV_HUGEPAGE mapping, so that the pages it
 * brings in are 2 MB folios (where the filesystem has them: ext4, xfs, tmpfs on recent kernels).
 * evict: first drops the file's cached pages that no process maps (POSIX_FADV_DONTNEED), so
 * that pages cached in small folios by an earlier copy or read() are read again. *bytes: the
 * file's size; *huge_bytes: how much of it the kernel mapped with 2 MB entries. */
int pm_file_recache(const char *path, int evict, size_t *bytes, size_t *huge_bytes, pm_err *e);

/* pm_file_recache of every shard; *bytes and *huge_bytes summed. */
int pm_weights_recache(const pm_weights *w, int evict, size_t *bytes, size_t *huge_bytes, pm_err *e);

/* Sets bf16_dot on every bf16 tensor of 2 or more dims (conv kernels are multiplied as matrices) (--compute bf16; the GEMM takes it where the CPU has
 * AVX512-BF16); returns how many were marked. */
int pm_weights_mark_bf16_dot(pm_weights *w);

/* Errors (listing up to a few names) if any tensor was never fetched. */
int pm_weights_check_consumed(const pm_weights *w, pm_err *e);

/* Parses one safetensors byte buffer's header (exposed for tests and fuzzing). On success fills a
 * malloc'd array of tensors (names malloc'd inside) with data pointing into buf. */
int pm_safetensors_parse(const uint8_t *buf, size_t len, const char *what, pm_tensor **out, int *n_out, pm_err *e);
void pm_safetensors_free_tensors(pm_tensor *t, int n);

#endif
