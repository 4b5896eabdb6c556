/* routes_info.c — GET /v1/models (and /v1/models/{id}), GET /health (200 "ok" once the model is
 * loaded, 503 "loading" before; never needs the API key), GET /metrics (Prometheus text). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "json_util.h"
#include "metrics.h"
#include "response_store.h"
#include "scheduler.h"

static json_t *model_obj(const srv_ctx *ctx) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(ctx->model_id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(ctx->started));
    json_object_set_new(m, "owned_by", json_string("phi4mm"));
    if (ctx->max_context > 0) json_object_set_new(m, "max_model_len", json_integer(ctx->max_context)); /* vLLM's model card */
    return m;
}

enum MHD_Result srv_route_models(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, const char *id) {
    if (id) {
        if (strcmp(id, ctx->model_id)) {
            srv_error e;
            srv_fail(&e, 404, "invalid_request_error", "model", "model_not_found", "the model '%s' does not exist (this server serves '%s')",
                     id, ctx->model_id);
            return srv_respond_error(ctx, c, sc, &e);
        }
        return srv_respond_json(ctx, c, sc, 200, model_obj(ctx));
    }
    json_t *data = json_array();
    json_array_append_new(data, model_obj(ctx));
    json_t *o = json_object();
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    return srv_respond_json(ctx, c, sc, 200, o);
}

/* GET /version (vLLM's): the library's version. */
enum MHD_Result srv_route_version(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    json_t *o = json_object();
    json_object_set_new(o, "version", json_string(pm_version()));
    return srv_respond_json(ctx, c, sc, 200, o);
}

enum MHD_Result srv_route_health(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    int ready = atomic_load(&ctx->ready);
    json_t *o = json_object();
    json_object_set_new(o, "status", json_string(ready ? "ok" : "loading"));
    json_object_set_new(o, "version", json_string(pm_version()));
    json_object_set_new(o, "model", json_string(ctx->model_id));
    json_object_set_new(o, "weights", json_string(pm_weight_format_name(ctx->o.load.weights)));
    json_object_set_new(o, "kv_cache", json_string(ctx->o.kv_bf16 ? "bf16" : "fp32"));
    int bf16 = ctx->o.load.compute_bf16; /* asked; once loaded, what is in effect */
    if (ready) {
        pm_model_info info;
        pm_model_get_info(ctx->model, &info);
        bf16 = info.compute_bf16;
    }
    json_object_set_new(o, "compute", json_string(bf16 ? "bf16" : "fp32"));
    if (ready) {
        json_object_set_new(o, "active_sequences", json_integer(srv_metrics_get_active(ctx->metrics)));
        json_object_set_new(o, "queue_depth", json_integer(srv_sched_queue_depth(ctx->sched)));
        json_object_set_new(o, "preparing_requests", json_integer(srv_metrics_get_preparing(ctx->metrics)));
        json_object_set_new(o, "request_bytes", json_integer((json_int_t)atomic_load(&ctx->req_used)));
    }
    return srv_respond_json(ctx, c, sc, ready ? 200 : 503, o);
}

enum MHD_Result srv_route_metrics(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    size_t len = 0;
    char *s = srv_metrics_render(ctx->metrics, atomic_load(&ctx->ready), srv_now(), &len);
    size_t entries = 0, bytes = 0;
    if (ctx->responses) srv_response_store_usage(ctx->responses, &entries, &bytes);
    char more[512];
    int n = snprintf(more, sizeof more,
                     "# HELP phi4mm_response_store_entries Conversations kept for previous_response_id.\n"
                     "# TYPE phi4mm_response_store_entries gauge\nphi4mm_response_store_entries %zu\n"
                     "# HELP phi4mm_response_store_bytes Bytes they hold (--response-store caps it).\n"
                     "# TYPE phi4mm_response_store_bytes gauge\nphi4mm_response_store_bytes %zu\n",
                     entries, bytes);
    char *all = s && n > 0 ? realloc(s, len + (size_t)n + 1) : NULL;
    if (all) {
        memcpy(all + len, more, (size_t)n + 1);
        s = all;
        len += (size_t)n;
    }
    return srv_respond(ctx, c, sc, 200, "text/plain; version=0.0.4; charset=utf-8", s, len);
}
