/* response_store.h — the conversations /v1/responses answers ended, kept in memory so that a next
 * request can name one by previous_response_id instead of sending it again (OpenAI's store: true).
 *
 * An entry is the whole conversation as chat messages (JSON text: the inputs, with the previous
 * responses' before them, and the answer as an assistant message; each message named for GET
 * .../input_items, response_items.h) and the response object itself
 * (GET /v1/responses/{id}), under the response's id and
 * its cache_salt: a request with another salt (or none where one was given) does not find it, as
 * the prompt cache keeps salted entries apart. Ids are 96 random bits, so that one client cannot
 * guess another's. The least recently used entries go when the total is over the cap; nothing
 * survives a restart. Thread-safe. */
#ifndef PM_SRV_RESPONSE_STORE_H
#define PM_SRV_RESPONSE_STORE_H

#include <stddef.h>

typedef struct srv_response_store srv_response_store;

/* A store of at most cap bytes of conversations. NULL on OOM. */
srv_response_store *srv_response_store_new(size_t cap);
void srv_response_store_free(srv_response_store *s);

/* Keeps messages and response (both taken: the response object's JSON, for GET) under id and salt
 * (NULL: none), replacing an entry of that id; the least recently used go while over the cap; one
 * larger than the cap is not kept. */
void srv_response_store_put(srv_response_store *s, const char *id, const char *salt, char *messages, char *response);

/* A malloc'd copy of the messages (or, with response set, of the response object's JSON) kept under
 * id for that salt, or NULL. */
char *srv_response_store_get(srv_response_store *s, const char *id, const char *salt, int response);

/* Drops the entry kept under id for that salt: 1, or 0 when there was none. */
int srv_response_store_delete(srv_response_store *s, const char *id, const char *salt);

/* Entries and their bytes now. */
void srv_response_store_usage(srv_response_store *s, size_t *entries, size_t *bytes);

#endif
