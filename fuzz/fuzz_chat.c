/* fuzz_chat.c — libFuzzer harness for POST /v1/chat/completions bodies: srv_json_parse (depth
 * limit, duplicate keys) then srv_chat_parse (parameters, messages, content parts, base64 and data:
 * URL media, placeholders, the chat template), exactly as the route runs them, with small limits
 * (4 images, 4 clips, 64 KiB per item, no media directory). The same bytes also go through
 * srv_json_text (model text -> JSON string), whose result must exist and be valid UTF-8, and the
 * server's and the tokenizer's UTF-8 validators must agree on the valid prefix.
 *
 * Properties of an accepted request: a prompt that passes the engine's placeholder check for the
 * media counts, media within the limits and never empty, at most SRV_MAX_STOP non-empty stops,
 * sampling values and log-probability counts in their documented ranges. A refused one: an HTTP
 * status and a message.
 * The same JSON also goes through srv_completion_parse (POST /v1/completions): accepted, a
 * non-empty prompt with no media and no placeholder, the same parameter ranges. With tools: their
 * list for the prompt, and a forced choice's schema compiles. The bytes also go through the
 * tool-call reader as model text (srv_tool_calls_find, srv_tool_content_ready), as a /v1/responses
 * body (translated to chat, then parsed; a refusal names no chat field; an accepted one's messages
 * named and listed back as input items, each with an id and a type), and through the
 * streaming call reader at once and in pieces (the same calls; each piece's a prefix of them). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/server/chat_parse.h"
#include "../tools/server/json_util.h"
#include "../tools/server/media_urls.h"
#include "../tools/server/response_items.h"
#include "../tools/server/responses_parse.h"
#include "../tools/server/tool_calls.h"
#include "engine/json_schema.h"
#include "fuzz_util.h"
#include "tok/chat.h"
#include "tok/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    size_t vp = srv_utf8_valid_prefix(s, size);
    FUZZ_CHECK(vp == pm_utf8_valid_prefix(data, size));
    json_t *txt = srv_json_text(s, size);
    FUZZ_CHECK(txt != NULL && json_is_string(txt));
    FUZZ_CHECK(pm_utf8_valid_prefix((const uint8_t *)json_string_value(txt), json_string_length(txt)) == json_string_length(txt));
    if (vp == size) FUZZ_CHECK(json_string_length(txt) == size && !memcmp(json_string_value(txt), s, size));
    json_decref(txt);

    /* the same bytes as model text holding calls: none, or calls with the content before them */
    for (int mode = SRV_TOOLS_OFF; mode <= SRV_TOOLS_FORCED; mode++) {
        size_t cl = 0, at = size ? data[0] % (size + 1) : SIZE_MAX;
        json_t *calls = srv_tool_calls_find(s, size, (srv_tool_mode)mode, mode == SRV_TOOLS_AUTO ? at : SIZE_MAX, SIZE_MAX, "x-1", 0, &cl);
        FUZZ_CHECK(calls ? json_array_size(calls) > 0 && cl <= size : cl == size);
        json_decref(calls);
        FUZZ_CHECK(srv_tool_content_ready(s, size, at) <= size);
    }
    /* the streaming reader (call_reader.h): read in pieces, the same as at once, and what any
     * prefix gave a prefix of the final names and arguments */
    srv_call_reader whole = {0}, parts = {0};
    srv_call_reader_read(&whole, s, 0, size);
    for (size_t to = 0, step = 1; to < size; step = step * 2 + 1) {
        to = to + step < size ? to + step : size;
        srv_call_reader_read(&parts, s, 0, to);
        FUZZ_CHECK(parts.n <= whole.n);
        for (int k = 0; k < parts.n && whole.state != -1; k++) {
            const srv_call_part *p = &parts.calls[k], *w = &whole.calls[k];
            FUZZ_CHECK(p->args_len <= w->args_len && (!p->args_len || !memcmp(p->args, w->args, p->args_len)));
            FUZZ_CHECK(!p->name_done || !strcmp(p->name, w->name));
        }
    }
    FUZZ_CHECK(parts.state == whole.state && parts.n == whole.n && srv_call_reader_complete(&parts) == srv_call_reader_complete(&whole));
    for (int k = 0; k < whole.n; k++)
        FUZZ_CHECK(parts.calls[k].args_len == whole.calls[k].args_len && parts.calls[k].name_done == whole.calls[k].name_done);
    srv_call_reader_free(&parts);
    srv_call_reader_free(&whole);

    srv_error e;
    memset(&e, 0, sizeof e);
    json_t *root = srv_json_parse(s, size, SRV_JSON_MAX_DEPTH, &e);
    if (!root) {
        FUZZ_CHECK(e.http == 400 && e.msg[0]);
        return 0;
    }
    srv_parse_limits lim = {.max_images = 4, .max_audios = 4, .max_media_bytes = 64 * 1024, .media_dir = NULL};
    srv_chat_req r;
    if (srv_chat_parse(root, &lim, &r, &e) == 0) {
        FUZZ_CHECK(r.prompt != NULL);
        FUZZ_CHECK(r.n_images >= 0 && r.n_images <= lim.max_images && r.n_audios >= 0 && r.n_audios <= lim.max_audios);
        for (int i = 0; i < r.n_images; i++) FUZZ_CHECK(r.images[i].data && r.images[i].len > 0 && r.images[i].len <= lim.max_media_bytes);
        for (int i = 0; i < r.n_audios; i++) FUZZ_CHECK(r.audios[i].data && r.audios[i].len > 0 && r.audios[i].len <= lim.max_media_bytes);
        FUZZ_CHECK(r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP);
        for (int i = 0; i < r.n_stop; i++) FUZZ_CHECK(r.stop[i] && r.stop[i][0]);
        FUZZ_CHECK(r.max_tokens >= 0);
        FUZZ_CHECK(r.sampling.temperature >= 0 && r.sampling.temperature <= 2 && r.sampling.top_p >= 0 && r.sampling.top_p <= 1);
        FUZZ_CHECK(r.sampling.top_k >= 0);
        FUZZ_CHECK(r.top_logprobs >= 0 && r.top_logprobs <= PM_MAX_TOP_LOGPROBS && (r.logprobs || !r.top_logprobs));
        pm_err pe = {0};
        char *rw = NULL;
        FUZZ_CHECK(pm_prompt_rewrite_placeholders(r.prompt, r.n_images, r.n_audios, &rw, &pe) == PM_OK);
        free(rw);
        /* tools: their list for the prompt; a forced choice's schema compiles */
        FUZZ_CHECK((r.tool_mode == SRV_TOOLS_OFF) == (r.tools_text == NULL));
        if (r.tool_mode == SRV_TOOLS_FORCED) {
            pm_json_schema *js = NULL;
            FUZZ_CHECK(r.format == PM_FORMAT_JSON_SCHEMA && pm_json_schema_compile(r.json_schema, &js, &pe) == PM_OK);
            pm_json_schema_free(js);
        }
    } else {
        FUZZ_CHECK(e.http >= 400 && e.http < 600 && e.msg[0]);
    }
    srv_chat_req_free(&r);
    /* again with the request's http(s) media URLs "fetched": every other one a payload of its own
     * URL's bytes, the others a failure; a URL the parse takes must be in the table */
    srv_fetch_table t = {0};
    int nt = srv_fetch_collect(&t, root, lim.max_images + lim.max_audios + 1);
    FUZZ_CHECK(nt >= 0 && nt <= lim.max_images + lim.max_audios + 1 && nt == t.n);
    for (int i = 0; i < t.n; i++) {
        FUZZ_CHECK(srv_is_remote_url(t.items[i].url) && srv_fetch_find(&t, t.items[i].url) == &t.items[i]);
        if (i % 2) snprintf(t.items[i].err, sizeof t.items[i].err, "failed");
        else if ((t.items[i].data = (uint8_t *)strdup(t.items[i].url))) t.items[i].len = strlen(t.items[i].url);
    }
    lim.fetched = &t;
    memset(&e, 0, sizeof e);
    if (srv_chat_parse(root, &lim, &r, &e) == 0) {
        for (int i = 0; i < r.n_images; i++) FUZZ_CHECK(r.images[i].data && r.images[i].len > 0 && r.images[i].len <= lim.max_media_bytes);
        for (int i = 0; i < r.n_audios; i++) FUZZ_CHECK(r.audios[i].data && r.audios[i].len > 0 && r.audios[i].len <= lim.max_media_bytes);
    } else {
        FUZZ_CHECK(e.http >= 400 && e.http < 600 && e.msg[0] && strcmp(e.code, "unsupported_url"));
    }
    srv_chat_req_free(&r);
    srv_fetch_table_free(&t);
    for (int completions = 0; completions < 2 && json_is_object(root); completions++) { /* the fields no route reads */
        char ign[24];
        int n_ign = srv_ignored_fields(root, completions, ign, sizeof ign);
        FUZZ_CHECK(n_ign >= 0 && n_ign <= (int)json_object_size(root) && strlen(ign) < sizeof ign && (n_ign > 0) == (ign[0] != 0));
    }
    if (json_is_object(root)) { /* the Responses API's */
        char ign[24];
        int n_ign = srv_responses_ignored(root, ign, sizeof ign);
        FUZZ_CHECK(n_ign >= 0 && n_ign <= (int)json_object_size(root) && strlen(ign) < sizeof ign && (n_ign > 0) == (ign[0] != 0));
    }
    memset(&e, 0, sizeof e);
    int k = srv_completion_prompts(root);
    FUZZ_CHECK(k >= 1 && k <= (int)json_array_size(json_object_get(root, "prompt")) + 1);
    for (int i = 0; i < k; i++) {
        memset(&e, 0, sizeof e);
        if (srv_completion_parse(root, i, &r, &e) == 0) {
            FUZZ_CHECK(r.n_images == 0 && r.n_audios == 0 && r.n >= 1 && r.n <= SRV_MAX_CHOICES && k <= SRV_MAX_CHOICES);
            if (r.prompt) {
                FUZZ_CHECK(r.prompt[0] && !srv_has_placeholder(r.prompt) && !r.prompt_ids);
                pm_err pe = {0};
                char *rw = NULL;
                FUZZ_CHECK(pm_prompt_rewrite_placeholders(r.prompt, 0, 0, &rw, &pe) == PM_OK);
                free(rw);
            } else {
                FUZZ_CHECK(r.prompt_ids && r.n_prompt_ids > 0);
                for (int t = 0; t < r.n_prompt_ids; t++) FUZZ_CHECK(r.prompt_ids[t] >= 0);
            }
            FUZZ_CHECK(r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP && r.max_tokens >= 0 && (r.max_tokens > 0 || !r.score_only || r.echo));
            FUZZ_CHECK(r.top_logprobs >= 0 && r.top_logprobs <= 5 && (r.logprobs || !r.top_logprobs));
            FUZZ_CHECK(r.sampling.temperature >= 0 && r.sampling.temperature <= 2 && r.sampling.top_p >= 0 && r.sampling.top_p <= 1);
        } else {
            FUZZ_CHECK(e.http >= 400 && e.http < 600 && e.msg[0]);
        }
        srv_chat_req_free(&r);
    }
    /* the same JSON as a /v1/responses body: the chat request it amounts to, or an error in the
     * body's own terms */
    json_t *chat = NULL, *names = NULL;
    memset(&e, 0, sizeof e);
    memset(&r, 0, sizeof r);
    int rrc = srv_responses_to_chat(root, json_object_get(root, "messages"), &chat, &names, &e);
    if (!rrc) {
        FUZZ_CHECK(json_is_array(json_object_get(chat, "messages")) && json_is_object(names));
        rrc = srv_chat_parse(chat, &lim, &r, &e);
        if (!rrc) FUZZ_CHECK(r.prompt != NULL && r.n == 1);
        if (!rrc) { /* kept: every message named, listed back as items that each have an id and a type */
            json_t *msgs = json_deep_copy(json_object_get(chat, "messages")), *items = NULL;
            FUZZ_CHECK(msgs && srv_items_name(msgs, "f") == 0 && (items = srv_items_from_messages(msgs, 1)));
            size_t i;
            json_t *it;
            json_array_foreach(items, i, it) FUZZ_CHECK(json_is_string(json_object_get(it, "id")) && json_is_string(json_object_get(it, "type")));
            json_decref(items);
            json_decref(msgs);
        }
    }
    if (rrc) {
        srv_responses_rename(names, &e);
        FUZZ_CHECK(e.http >= 400 && e.http < 600 && e.msg[0] && strncmp(e.param, "messages[", 9));
    }
    srv_chat_req_free(&r);
    json_decref(chat);
    json_decref(names);
    json_decref(root);
    return 0;
}
