/* call_reader.c — see call_reader.h. */
#include "call_reader.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum { R_BEFORE = 0, R_IN = 1, R_AFTER = 2, R_BAD = -1 };
enum { M_NONE = 0, M_NAME = 1, M_ARGS = 2, M_OTHER = 3 };
enum { MAX_DEPTH = 256 };

static void bad(srv_call_reader *r) { r->state = R_BAD; }

static void args_put(srv_call_reader *r, char c) {
    srv_call_part *p = &r->calls[r->n - 1];
    if (p->args_len + 2 > p->args_cap) {
        size_t cap = p->args_cap ? p->args_cap * 2 : 64;
        char *a = realloc(p->args, cap);
        if (!a) {
            bad(r);
            return;
        }
        p->args = a;
        p->args_cap = cap;
    }
    p->args[p->args_len++] = c;
    p->args[p->args_len] = 0;
}

static void new_call(srv_call_reader *r) {
    if (r->n == SRV_CALL_MAX) {
        bad(r);
        return;
    }
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 4;
        srv_call_part *c = realloc(r->calls, sizeof *c * (size_t)cap);
        if (!c) {
            bad(r);
            return;
        }
        r->calls = c;
        r->cap = cap;
    }
    memset(&r->calls[r->n++], 0, sizeof *r->calls);
    r->expect_key = 1;
    r->member = M_NONE;
}

/* A key at the call's level has closed: which member its value is. */
static void key_done(srv_call_reader *r) {
    srv_call_part *p = &r->calls[r->n - 1];
    r->member = M_OTHER;
    if (r->key_len >= (int)sizeof r->key) return; /* longer than any key read */
    r->key[r->key_len] = 0;
    if (!strcmp(r->key, "name") && !p->name_len) r->member = M_NAME;
    else if (!strcmp(r->key, "arguments") || !strcmp(r->key, "parameters")) r->member = M_ARGS;
    if (r->member == M_ARGS && p->args_begun) bad(r);
}

/* One byte inside a string. */
static void in_string(srv_call_reader *r, char c) {
    srv_call_part *p = &r->calls[r->n - 1];
    int closes = !r->esc && c == '"';
    if (r->member == M_ARGS && r->depth > (r->list ? 2 : 1)) args_put(r, c);
    else if (r->in_key && !closes) {
        if (r->key_len < (int)sizeof r->key) r->key[r->key_len] = c;
        r->key_len++;
    } else if (r->member == M_NAME && !closes) {
        if (!(isalnum((unsigned char)c) || c == '_' || c == '-') || p->name_len == SRV_CALL_NAME_MAX) {
            bad(r);
            return;
        }
        p->name[p->name_len++] = c;
    }
    if (r->esc) r->esc = 0;
    else if (c == '\\') r->esc = 1;
    else if (c == '"') {
        r->in_str = 0;
        if (r->in_key) {
            r->in_key = 0;
            key_done(r);
        } else if (r->member == M_NAME) {
            p->name[p->name_len] = 0;
            p->name_done = p->name_len > 0;
            r->member = M_OTHER; /* a second string here is not the name */
            if (!p->name_done) bad(r);
        }
    }
}

/* One byte outside strings, at the level of a call's members (depth L). */
static void at_call(srv_call_reader *r, char c) {
    srv_call_part *p = &r->calls[r->n - 1];
    switch (c) {
    case '"':
        r->in_str = 1;
        if (r->expect_key) r->in_key = 1, r->key_len = 0;
        else if (r->member == M_ARGS) bad(r); /* arguments as JSON text: read at the end */
        else if (r->member != M_NAME) r->member = M_OTHER;
        return;
    case ':': r->expect_key = 0; return;
    case ',': r->expect_key = 1, r->member = M_NONE; return;
    case '{':
    case '[':
        if (r->member == M_NAME) bad(r);
        if (r->member == M_ARGS) p->args_begun = 1, args_put(r, c);
        r->depth++;
        return;
    case '}':
        r->depth--;
        if (!r->list) r->state = R_AFTER;
        return;
    default:
        if (r->member == M_ARGS || r->member == M_NAME) bad(r); /* a number or literal where a call has none */
    }
}

static void read_byte(srv_call_reader *r, char c) {
    int L = r->list ? 2 : 1;
    if (r->state == R_BEFORE) {
        if (isspace((unsigned char)c)) return;
        r->state = R_IN;
        r->depth = 1;
        if (c == '[') r->list = 1;
        else if (c == '{') new_call(r);
        else bad(r);
        return;
    }
    if (r->in_str) {
        in_string(r, c);
        return;
    }
    if (isspace((unsigned char)c)) return;
    if (r->depth == L) {
        at_call(r, c);
        return;
    }
    if (r->depth > L) { /* inside a member's value */
        if (r->member == M_ARGS) args_put(r, c);
        if (c == '"') r->in_str = 1;
        else if (c == '{' || c == '[') {
            if (++r->depth > MAX_DEPTH) bad(r);
        } else if (c == '}' || c == ']') {
            if (--r->depth == L && r->member == M_ARGS) r->calls[r->n - 1].args_done = 1;
        }
        return;
    }
    /* depth 1 of a list: between calls */
    if (c == '{') r->depth = 2, new_call(r);
    else if (c == ']') r->depth = 0, r->state = R_AFTER;
    else if (c != ',') bad(r);
}

void srv_call_reader_read(srv_call_reader *r, const char *text, size_t from, size_t to) {
    if (!r->started) r->started = 1, r->pos = from;
    for (; r->pos < to && (r->state == R_BEFORE || r->state == R_IN); r->pos++) read_byte(r, text[r->pos]);
    if (r->pos < to) r->pos = to; /* after the value or bad: the rest is not read */
}

int srv_call_reader_complete(const srv_call_reader *r) {
    if (r->state != R_AFTER || !r->n) return 0;
    for (int k = 0; k < r->n; k++)
        if (!r->calls[k].name_done || (r->calls[k].args_begun && !r->calls[k].args_done)) return 0;
    return 1;
}

void srv_call_reader_free(srv_call_reader *r) {
    for (int k = 0; k < r->n; k++) free(r->calls[k].args);
    free(r->calls);
    memset(r, 0, sizeof *r);
}
