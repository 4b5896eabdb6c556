/* metrics.h — the server's counters and gauges, rendered as Prometheus text (format 0.0.4):
 *   phi4mm_requests_total{endpoint,mode,status}       counter: answered requests
 *   phi4mm_request_finish_total{reason}               counter: stop / length / cancelled / error
 *   phi4mm_queue_depth                                gauge: accepted requests waiting for a slot
 *   phi4mm_active_sequences                           gauge: sequences live in the engine
 *   phi4mm_preparing_requests                         gauge: requests being encoded and prefilled
 *                                                     beside the steps (the prompt thread: 0 or 1)
 *   phi4mm_kv_reserved_bytes, phi4mm_kv_budget_bytes   gauges: KV cache the live sequences reserve,
 *                                                     and the engine's budget for it (-1: none)
 *   phi4mm_prompt_tokens_total, phi4mm_generated_tokens_total   counters
 *   phi4mm_tokens_per_second                          gauge: generated tokens/s over the last 10 s
 *   phi4mm_audio_seconds_total                        counter: seconds of audio admitted
 *   phi4mm_longrope_recomputes_total                  counter: sequences past original_max_position
 *                                                     whose cache the prompt thread recomputed
 *   phi4mm_inline_admissions_total                    counter: short text requests admitted while the
 *                                                     prompt thread was busy (--inline-prompt-max)
 *   phi4mm_prompt_cache_lookups_total, _hits_total, _reused_tokens_total   counters: prompts
 *                                                     looked up in the prompt cache, those that
 *                                                     started past a kept prefix, positions skipped
 *   phi4mm_prompt_cache_bytes, phi4mm_prompt_cache_cap_bytes   gauges (cap 0: off)
 *   phi4mm_media_cache_lookups_total, _hits_total     counters: media looked up among the kept
 *                                                     encoder outputs, and found
 *   phi4mm_media_cache_bytes                          gauge
 *   phi4mm_draft_tokens_total, _accepted_total        counters: --draft's tokens checked and taken
 *   phi4mm_media_fetches_total{result}                counter: media URLs fetched (ok) or not (failed)
 *   phi4mm_media_fetch_bytes_total, _seconds_total    counters: their bytes, and the time requests
 *                                                     waited for them (--allow-media-hosts)
 *   phi4mm_time_to_first_token_seconds                histogram (arrival -> first token)
 *   phi4mm_model_ready                                gauge: 1 once the model is loaded
 * Thread-safe (one mutex); owned by the server context. */
#ifndef PM_SRV_METRICS_H
#define PM_SRV_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "phi4mm.h"

typedef struct srv_metrics srv_metrics;

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);

/* "language", "vision", "speech", "vision_speech"; "none" for a negative mode. */
const char *srv_mode_name(int mode);

void srv_metrics_request(srv_metrics *m, const char *endpoint, const char *mode, int status);
void srv_metrics_finish(srv_metrics *m, pm_finish reason, int prompt_tokens, int completion_tokens);
void srv_metrics_queue_depth(srv_metrics *m, int depth);
void srv_metrics_active(srv_metrics *m, int live);
int srv_metrics_get_active(srv_metrics *m);
void srv_metrics_preparing(srv_metrics *m, int n);
int srv_metrics_get_preparing(srv_metrics *m);
/* A LongRoPE recompute handed to the prompt thread. */
void srv_metrics_recompute(srv_metrics *m);
/* A short text request admitted past a busy prompt thread. */
void srv_metrics_inline_admission(srv_metrics *m);
void srv_metrics_kv(srv_metrics *m, int64_t reserved, int64_t budget);
void srv_metrics_prefix(srv_metrics *m, const pm_prefix_stats *st);
/* The engine's drafted and taken tokens so far (pm_engine_draft_stats). */
void srv_metrics_draft(srv_metrics *m, int64_t drafted, int64_t accepted);
/* Tokens generated in one engine step, at monotonic time now (seconds). */
void srv_metrics_step(srv_metrics *m, int tokens, double now);
void srv_metrics_audio(srv_metrics *m, double seconds);
/* A request's media URLs fetched: ok and failed URLs, the bytes that came, the seconds it waited. */
void srv_metrics_fetch(srv_metrics *m, int ok, int failed, long long bytes, double seconds);
void srv_metrics_ttft(srv_metrics *m, double seconds);

/* The exposition text (malloc'd). */
char *srv_metrics_render(srv_metrics *m, int ready, double now, size_t *len);

#endif
