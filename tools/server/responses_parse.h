/* responses_parse.h — a POST /v1/responses body (OpenAI's Responses API) as the chat request it
 * amounts to, so that one parser (chat_parse.h) checks and renders every conversation.
 *
 * instructions -> a system message first; input (a string: one user message; or a list of items)
 * -> messages: {role, content} messages (type "message"; content a string or parts input_text /
 * output_text -> text, input_image {image_url} -> image_url, input_audio -> input_audio), a run of
 * function_call items -> one assistant message's tool_calls (joined to the assistant message just
 * before, if any), function_call_output -> a tool message; an item's own id stays with it ("id" on
 * the message, "item_id" on the call: response_items.h). max_output_tokens -> max_tokens,
 * text.format -> response_format, function tools {type, name, description, parameters} and
 * tool_choice {type: function, name} -> chat's nested forms; include
 * ["message.output_text.logprobs"] -> logprobs (top_logprobs alternatives); temperature, top_p, stream,
 * parallel_tool_calls and the extensions chat takes (seed, top_k, stop, penalties, logit_bias,
 * min_tokens, ignore_eos, cache_salt) as they are; previous_response_id's conversation
 * (response_store.h) goes between the instructions and the input. What this server cannot honour
 * is a 400 naming it: conversation objects,
 * background, any other include, truncation "auto", max_tool_calls, hosted tools, file inputs,
 * item references.
 *
 * The chat parser's errors name chat's fields; srv_responses_rename puts them back in the body's
 * terms ("messages[2].content[0]" -> "input[1].content[0]", "max_tokens" -> "max_output_tokens"). */
#ifndef PM_SRV_RESPONSES_PARSE_H
#define PM_SRV_RESPONSES_PARSE_H

#include <jansson.h>

#include "server.h"

/* The chat body of root (a new reference in *chat) and the map from its messages back to the
 * body's fields (a new reference in *names: srv_responses_rename reads it). previous: the
 * conversation previous_response_id names (chat messages, after the instructions and before the
 * input; NULL: none). -1 with e set. */
int srv_responses_to_chat(const json_t *root, const json_t *previous, json_t **chat, json_t **names, srv_error *e);

/* The body's top-level fields nothing reads (srv_unread_fields, chat_parse.h): how many, named in out. */
int srv_responses_ignored(const json_t *root, char *out, size_t cap);

/* Rewrites e's param and message from the chat body's field names to the responses body's. */
void srv_responses_rename(const json_t *names, srv_error *e);

#endif
