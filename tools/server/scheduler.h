/* scheduler.h — the inference thread. It alone owns the pm_engine: between engine steps it takes
 * new jobs from a bounded queue (at most --max-queue waiting) into free engine slots (--parallel),
 * submits them (after the prompt thread has run their encoders and prefill beside the steps),
 * forwards cancellations of jobs whose client went away, and steps the batch. Callbacks from the
 * engine land in the jobs. */
#ifndef PM_SRV_SCHEDULER_H
#define PM_SRV_SCHEDULER_H

#include "job.h"
#include "server.h"

/* Creates the engine (ctx->model, ctx->o.parallel, ctx->o.prefill_chunk, ctx->limits) and
 * starts the thread. Returns PM_OK or a negative status with a message. */
int srv_sched_start(srv_sched **out, srv_ctx *ctx, char *err, size_t errlen);

/* Plans a job not yet queued, on the calling thread (the engine's plan reads only what never
 * changes): 0, or -1 with e the error its admission would answer (400 for a bad prompt). */
int srv_sched_plan(srv_sched *s, srv_job *j, srv_error *e);
/* The job's prompt as the decoder would take it (pm_engine_prompt_ids): *ids malloc'd. 0, or -1
 * with e set. Any thread. */
int srv_sched_prompt_ids(srv_sched *s, srv_job *j, int32_t **ids, size_t *n, srv_error *e);

/* Queues the n jobs of one request, all or none (the scheduler takes its own reference to each).
 * Returns PM_OK, PM_EBUSY when the queue has no room for all, or PM_ESTATE when the scheduler is
 * stopping; the jobs are untouched on failure. */
int srv_sched_enqueue(srv_sched *s, srv_job *const *jobs, int n);

/* Wakes the thread (a job was cancelled). */
void srv_sched_poke(srv_sched *s);

/* Waiting jobs. */
int srv_sched_queue_depth(srv_sched *s);
/* The engine's KV budget in bytes (< 0: none); fixed once started. */
int64_t srv_sched_kv_budget(const srv_sched *s);
/* The prompt cache's cap (0: off). */
int64_t srv_sched_prompt_cache(const srv_sched *s);

/* Refuses new jobs, ends queued ones with 503, cancels live ones (each gets its final event),
 * joins the thread and frees the engine. Enqueueing afterwards answers PM_ESTATE. */
void srv_sched_stop(srv_sched *s);
/* Frees the scheduler itself; only once no HTTP thread can reach it (after MHD_stop_daemon). */
void srv_sched_free(srv_sched *s);

#endif
