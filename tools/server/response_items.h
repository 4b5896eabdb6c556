/* response_items.h — a kept conversation (response_store.h: chat messages) as the Responses API's
 * items, for GET /v1/responses/{id}/input_items.
 *
 * The store keeps chat messages, so the items are rebuilt from them: a system, developer or user
 * message -> a message item with input_text / input_image / input_audio parts; an assistant
 * message -> a message item with an output_text part (when it has text, or no calls), then a
 * function_call item per tool call; a tool message -> a function_call_output item. Ids are kept
 * in the messages themselves ("id" on a message, "item_id" on a tool call: chat's parser and
 * template read neither), given when the conversation is kept: the client's own where its input
 * item had one, the answer's output item ids for the answer, otherwise ones made from the
 * response's id and the message's place. A conversation carried on by previous_response_id keeps
 * its ids, so an item has the same id in every response that holds it. */
#ifndef PM_SRV_RESPONSE_ITEMS_H
#define PM_SRV_RESPONSE_ITEMS_H

#include <jansson.h>

/* Gives every message of msgs (and every tool call in them) that has no id one made from hex (the
 * response id's random part): "msg_<hex>_<i>", "fco_<hex>_<i>" for tool messages, "fc_<hex>_<i>_<k>"
 * for calls. 0, or -1 on OOM. */
int srv_items_name(json_t *msgs, const char *hex);

/* msgs as items, in order (a new array; NULL on OOM). image_urls: an input_image part carries its
 * image_url (else null, as OpenAI's list does unless "message.input_image.image_url" is included). */
json_t *srv_items_from_messages(const json_t *msgs, int image_urls);

#endif
