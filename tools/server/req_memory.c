/* req_memory.c — see req_memory.h. */
#include "req_memory.h"

int srv_req_take(srv_ctx *ctx, int64_t held, int64_t bytes) {
    if (bytes <= 0) return 0;
    if (held + bytes > ctx->req_budget) return 2;
    int64_t cur = atomic_load(&ctx->req_used);
    do {
        if (cur + bytes > ctx->req_budget) return 1;
    } while (!atomic_compare_exchange_weak(&ctx->req_used, &cur, cur + bytes));
    return 0;
}

void srv_req_give(srv_ctx *ctx, int64_t bytes) {
    if (bytes > 0) atomic_fetch_sub(&ctx->req_used, bytes);
}
