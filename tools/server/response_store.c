/* response_store.c — see response_store.h. A list in recency order (most recent first): a lookup
 * walks it, which at the few thousand entries a cap of tens of MB holds costs microseconds.
 *
 * A kept text of 64 KB or more (a conversation with an image) lives in its own mapping, unmapped
 * when it goes: malloc'd, such blocks land in whichever HTTP thread's arena made them, and a full
 * store churning its evictions left ~15 MB more resident than it held (the soak's RSS check), as
 * glibc's mmap threshold had risen past their size. */
#include "response_store.h"

#include <pthread.h>
#include <sys/mman.h>
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

enum { MAP_AT = 64 << 10 };

/* A kept copy of text (n bytes): mapped when large, else malloc'd (NULL on OOM); kept_free gives it back. */
static char *kept_copy(const char *text, size_t n) {
    if (n + 1 < MAP_AT) return strdup(text);
    char *p = mmap(NULL, n + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memcpy(p, text, n + 1);
    return p;
}

static void kept_free(char *p) {
    if (!p) return;
    size_t n = strlen(p);
    if (n + 1 < MAP_AT) free(p);
    else munmap(p, n + 1);
}

static void drop(srv_response_store *s, entry *e) {
    unlink_entry(s, e);
    s->bytes -= e->bytes;
    s->n--;
    free(e->id);
    free(e->salt);
    kept_free(e->messages);
    kept_free(e->response);
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
    size_t nm = strlen(messages), nr = strlen(response);
    size_t bytes = nm + nr + strlen(id) + (salt ? strlen(salt) : 0) + sizeof(entry);
    entry *e = bytes <= s->cap ? calloc(1, sizeof *e) : NULL;
    if (e) {
        e->id = strdup(id);
        e->salt = salt ? strdup(salt) : NULL;
        e->messages = kept_copy(messages, nm);
        e->response = kept_copy(response, nr);
        e->bytes = bytes;
    }
    free(messages);
    free(response);
    if (!e || !e->id || (salt && !e->salt) || !e->messages || !e->response) { /* too large to keep, or out of memory: not kept */
        if (e) free(e->id), free(e->salt), kept_free(e->messages), kept_free(e->response), free(e);
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
