/* prefix_cache.h — the KV of prompts whose sequences have ended, kept so that a later prompt that
 * begins the same way (a conversation's next turn resends the whole history; many requests share
 * a system prompt) starts its prefill past them instead of computing them again.
 *
 * A prompt is offered twice: copied once its prefill completes (the next choices of the same
 * prompt, a request with the same system prompt, need not wait), and moved when its sequence ends
 * (dropped then when the copy still holds it).
 *
 * Exact by construction: a prefill runs in chunks from position 0 whose boundaries depend only
 * on the ids before them (the engine's chunk_end: prefill_chunk rows, or fewer up to a message's
 * <|end|>), and a chunk's numbers depend on its rows and on the cache before it, so a prompt's
 * whole chunks are the very bits a fresh prefill of any prompt that begins with the same rows
 * computes. Only those are kept (up to a boundary a longer prompt shares; never a generated
 * token's, which the decode path computed row by row), and a reuse ends on a boundary of the new
 * prompt's own chunks, from where the prefill goes on as a fresh one: the tokens come out bit for
 * bit as without the cache. A position's key is its token id, or, for a media row, a hash of the row
 * itself, and a match there is confirmed on the rows, which an entry keeps (12 KiB a position
 * against 256 KiB of K/V at Phi-4-mini's dims), so that no crafted input can pass for another;
 * the adapter and the RoPE factor set must match too (the speech and vision LoRAs change every
 * position's K and V), and so must the requests' cache salt (pm_request.cache_salt: tenants apart).
 *
 * Thread-safe (a mutex): the stepping thread puts, the prompt thread takes. */
#ifndef PM_PREFIX_CACHE_H
#define PM_PREFIX_CACHE_H

#include <stdint.h>

#include "phi4mm.h"
#include "engine/prepare.h"
#include "model/llm.h"

typedef struct pm_prefix_cache pm_prefix_cache;

/* A cache of at most cap_bytes of KV pages; NULL when out of memory. */
pm_prefix_cache *pm_prefix_cache_new(int64_t cap_bytes);
void pm_prefix_cache_free(pm_prefix_cache *pc);

/* The keys of positions [0, n) of a prompt (prep's ids; the rows of media placeholders hashed
 * from prep->embeds, which must hold them). *out malloc'd. */
int pm_prefix_keys(const pm_prepared *prep, int n, int hidden, uint64_t **out, pm_err *e);

/* Offers a cache whose positions [0, len) are whole prefill chunks of keys (len > 0) over the
 * input rows `rows` [len][hidden] (the media ones are copied). Kept: keys is taken, and kv's pages
 * move in (an ended sequence's: *kv emptied, pages past len freed) or, with copy (the model's
 * config), are copied (a live sequence's, whose prompt was just prefilled: the next choices of the
 * same prompt, or another request with the same system prompt, need not wait for it to end);
 * otherwise (too large, already held) nothing changes and the caller frees both. Returns 1 when
 * kept. Older entries that the new one covers go, and the least recently used ones while the cache
 * is over its cap. */
int pm_prefix_cache_put(pm_prefix_cache *pc, uint64_t *keys, const float *rows, int hidden, int len, int adapter, int rope_long,
                        const char *salt, pm_kv_cache *kv, const pm_llm_config *copy);

/* The longest kept prefix of keys[0, n) (input rows `rows` [n][hidden]) under the same adapter, RoPE factors, element type and salt,
 * cut to the last of the prompt's chunk boundaries bounds[n_bounds] (ascending) within it, copied into dst (an empty cache;
 * dst->bf16 set): returns the positions copied (dst->len), 0 when none, < 0 on error. */
int pm_prefix_cache_take(pm_prefix_cache *pc, const uint64_t *keys, const float *rows, int n, const int *bounds, int n_bounds, int adapter,
                         int rope_long, const char *salt, const pm_llm_config *c, pm_kv_cache *dst, pm_err *e);

void pm_prefix_cache_stats(pm_prefix_cache *pc, pm_prefix_stats *st);

#endif
