/* req_memory.h — the server's memory for request data: buffered request bodies and decoded media
 * (audio samples, image pixels), held by all connections and jobs together. Uploads are charged
 * before the bytes are allocated, because what a request costs is not what it sends: a FLAC of
 * silence decodes to ~3000 times its size, and 1000 connections may each buffer --max-body. */
#ifndef PM_SRV_REQ_MEMORY_H
#define PM_SRV_REQ_MEMORY_H

#include <stdint.h>

#include "server.h"

/* Takes bytes of ctx's budget: 0 taken; 1 not now (the budget is in use); 2 never (held + bytes
 * exceeds the whole budget: held is what the caller already has). */
int srv_req_take(srv_ctx *ctx, int64_t held, int64_t bytes);
void srv_req_give(srv_ctx *ctx, int64_t bytes);

#endif
