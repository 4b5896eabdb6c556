/* routes_tokens.c — POST /tokenize and POST /detokenize (vLLM's extensions), for clients that
 * count a prompt's tokens before they send it (to fit the context, or a budget) or read ids back.
 *
 * /tokenize takes a chat body ("messages", with the chat route's parts, tools and template) or a
 * raw "prompt" (one string or one list of ids, as /v1/completions takes it) and answers
 * {"count", "max_model_len", "tokens"}: the ids the decoder would take, each media placeholder
 * expanded to its item's positions (which hold the placeholder's id). No encoder runs, but the
 * media are decoded (their sizes set the counts), under the chat route's limits. /detokenize takes
 * {"tokens": [ids]} and answers {"prompt": text}: the tokens' bytes in order, special tokens as
 * their text, bytes that are not UTF-8 as U+FFFD. */
#include <stdlib.h>
#include <string.h>

#include "chat_parse.h"
#include "http.h"
#include "json_util.h"
#include "media_fetch.h"
#include "scheduler.h"

/* The request as a job of nothing to generate (the context then holds the prompt alone). */
/* *parked: the connection waits for the request's image URLs (media_fetch.h); NULL is returned. */
static srv_job *parse_job(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, const json_t *root, int *parked, srv_error *e) {
    srv_chat_req r;
    int rc;
    srv_job_kind kind = SRV_JOB_CHAT;
    if (!json_is_object(root)) {
        srv_bad(e, NULL, "invalid_type", "the body must be a JSON object");
        return NULL;
    }
    if (json_object_get(root, "messages")) {
        srv_parse_limits lim = srv_request_limits(ctx);
        int f = srv_fetch_media(ctx, c, sc, root, &lim, e);
        if (f) {
            *parked = f > 0;
            return NULL;
        }
        rc = srv_chat_parse(root, &lim, &r, e);
        srv_fetch_release(ctx, sc);
    } else if (json_object_get(root, "prompt")) {
        kind = SRV_JOB_COMPLETION;
        memset(&r, 0, sizeof r);
        rc = srv_completion_prompts(root) != 1
                 ? srv_bad(e, "prompt", "invalid_value", "/tokenize takes one prompt (a string or a list of token ids)")
                 : srv_completion_parse(root, 0, &r, e);
    } else {
        srv_bad(e, "messages", "missing_field", "a /tokenize body holds messages (a chat, as /v1/chat/completions takes it) or a prompt");
        return NULL;
    }
    if (!rc) rc = srv_refuse_ignored(ctx, sc, srv_ignored_fields(root, kind == SRV_JOB_COMPLETION, sc->ignored, sizeof sc->ignored), e);
    srv_job *j = rc ? NULL : srv_chat_job(ctx, &r, kind, 0, 0, e);
    srv_chat_req_free(&r);
    if (j) j->max_tokens = 0;
    return j;
}

enum MHD_Result srv_route_tokenize(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    srv_error e;
    json_t *root = srv_json_parse(sc->body ? sc->body : "", sc->len, SRV_JSON_MAX_DEPTH, &e);
    if (!root) return srv_respond_error(ctx, c, sc, &e);
    int parked = 0;
    srv_job *j = parse_job(ctx, c, sc, root, &parked, &e);
    json_decref(root);
    if (parked) return MHD_YES;
    srv_conn_free_body(ctx, sc);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = !j || srv_sched_prompt_ids(ctx->sched, j, &ids, &n, &e);
    if (j) {
        sc->mode = (int)j->mode;
        srv_job_free_media(j);
        srv_job_unref(j);
    }
    if (rc) return srv_respond_error(ctx, c, sc, &e);
    json_t *o = json_object(), *tokens = json_array();
    for (size_t i = 0; o && tokens && i < n; i++) json_array_append_new(tokens, json_integer(ids[i]));
    free(ids);
    if (o && tokens) {
        json_object_set_new(o, "count", json_integer((json_int_t)n));
        json_object_set_new(o, "max_model_len", json_integer(ctx->max_context));
        json_object_set_new(o, "tokens", tokens);
    } else {
        json_decref(tokens);
        json_decref(o);
        o = NULL;
    }
    return srv_respond_json(ctx, c, sc, 200, o);
}

enum MHD_Result srv_route_detokenize(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    srv_error e;
    json_t *root = srv_json_parse(sc->body ? sc->body : "", sc->len, SRV_JSON_MAX_DEPTH, &e);
    if (!root) return srv_respond_error(ctx, c, sc, &e);
    srv_conn_free_body(ctx, sc);
    const json_t *t = json_is_object(root) ? json_object_get(root, "tokens") : NULL;
    static const char *const read[] = {"tokens", "model", NULL};
    const char *const *const lists[] = {read, NULL};
    int refused = srv_refuse_ignored(ctx, sc, srv_unread_fields(root, lists, sc->ignored, sizeof sc->ignored), &e);
    if (!refused && !json_is_array(t)) refused = srv_bad(&e, "tokens", "invalid_type", "tokens must be an array of token ids");
    if (refused) {
        json_decref(root);
        return srv_respond_error(ctx, c, sc, &e);
    }
    pm_model_info info;
    pm_model_get_info(ctx->model, &info);
    size_t n = json_array_size(t), len = 0, cap = 64;
    char *text = malloc(cap);
    int rc = text ? 0 : srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        const json_t *v = json_array_get(t, i);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        size_t bl = 0;
        const char *b = id >= 0 && id < info.vocab ? pm_model_token_bytes(ctx->model, (int32_t)id, &bl) : NULL;
        char param[48];
        snprintf(param, sizeof param, "tokens[%zu]", i);
        if (!b) {
            rc = srv_bad(&e, param, "invalid_value", "%s is not a token id of the tokenizer (ids are integers in [0, %d))", param, info.vocab);
            break;
        }
        if (len + bl + 1 > cap) {
            while (len + bl + 1 > cap) cap *= 2;
            char *grown = realloc(text, cap);
            if (!grown) {
                rc = srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
                break;
            }
            text = grown;
        }
        memcpy(text + len, b, bl);
        len += bl;
    }
    json_decref(root);
    json_t *o = NULL;
    if (!rc && (o = json_object())) json_object_set_new(o, "prompt", srv_json_text(text, len));
    free(text);
    if (rc) return srv_respond_error(ctx, c, sc, &e);
    return srv_respond_json(ctx, c, sc, 200, o);
}
