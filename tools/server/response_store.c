/* response_store.c — see response_store.h. A list in recency order (most recent first): a lookup
 * walks it, which at the few thousand entries a cap of tens of MB holds costs microseconds. */
#include "response_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    struct entry *prev, *next;
    char *id, *salt, *messages, *response;
    size_t bytes;
} entry;

struct srv_response_store {
    pthread_mutex_t mu;
    entry *head, *tail;
    size_t cap, bytes, n;
};

srv_response_store *srv_response_store_new(size_t cap) {
    srv_response_store *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->cap = cap;
    return s;
}

static void unlink_entry(srv_response_store *s, entry *e) {
    if (e->prev) e->prev->next = e->next;
    else s->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else s->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(srv_response_store *s, entry *e) {
    e->next = s->head;
    if (s->head) s->head->prev = e;
    s->head = e;
    if (!s->tail) s->tail = e;
}

static void drop(srv_response_store *s, entry *e) {
    unlink_entry(s, e);
    s->bytes -= e->bytes;
    s->n--;
    free(e->id);
    free(e->salt);
    free(e->messages);
    free(e->response);
    free(e);
}

void srv_response_store_free(srv_response_store *s) {
    if (!s) return;
    while (s->head) drop(s, s->head);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int same_salt(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

static entry *find(srv_response_store *s, const char *id) {
    for (entry *e = s->head; e; e = e->next)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

void srv_response_store_put(srv_response_store *s, const char *id, const char *salt, char *messages, char *response) {
    size_t bytes = strlen(messages) + strlen(response) + strlen(id) + (salt ? strlen(salt) : 0) + sizeof(entry);
    entry *e = bytes <= s->cap ? calloc(1, sizeof *e) : NULL;
    if (e) {
        e->id = strdup(id);
        e->salt = salt ? strdup(salt) : NULL;
        e->messages = messages;
        e->response = response;
        e->bytes = bytes;
    }
    if (!e || !e->id || (salt && !e->salt)) { /* too large to keep, or out of memory: not kept */
        if (e) free(e->id), free(e->salt), free(e);
        free(messages);
        free(response);
        return;
    }
    pthread_mutex_lock(&s->mu);
    entry *old = find(s, id);
    if (old) drop(s, old);
    while (s->tail && s->bytes + bytes > s->cap) drop(s, s->tail);
    push_front(s, e);
    s->bytes += bytes;
    s->n++;
    pthread_mutex_unlock(&s->mu);
}

char *srv_response_store_get(srv_response_store *s, const char *id, const char *salt, int response) {
    pthread_mutex_lock(&s->mu);
    entry *e = find(s, id);
    char *out = NULL;
    if (e && same_salt(e->salt, salt)) {
        unlink_entry(s, e);
        push_front(s, e);
        out = strdup(response ? e->response : e->messages);
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

int srv_response_store_delete(srv_response_store *s, const char *id, const char *salt) {
    pthread_mutex_lock(&s->mu);
    entry *e = find(s, id);
    int found = e && same_salt(e->salt, salt);
    if (found) drop(s, e);
    pthread_mutex_unlock(&s->mu);
    return found;
}

void srv_response_store_usage(srv_response_store *s, size_t *entries, size_t *bytes) {
    pthread_mutex_lock(&s->mu);
    *entries = s->n;
    *bytes = s->bytes;
    pthread_mutex_unlock(&s->mu);
}
