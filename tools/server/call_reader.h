/* call_reader.h — reads the model's tool calls while their JSON text grows, so that a streamed
 * answer can send each call's name as soon as it is written and its arguments piece by piece, as
 * OpenAI streams delta.tool_calls.
 *
 * The text read is a list of calls [{"name": N, "arguments": {...}}, ...] or one call object alone
 * ("parameters" is read as "arguments"; other members are skipped). A call's arguments are kept
 * as the model wrote them without the whitespace outside strings, so that the text is the same
 * whether it was read at once or a byte at a time, and a prefix of the text read gives a prefix of
 * the arguments: what a stream sent stays a prefix of the final arguments. Anything else (a
 * name with other characters than OpenAI's [A-Za-z0-9_-], arguments that are not an object or a
 * list, a second arguments member) stops the reader (bad): the caller then falls back to reading
 * the whole answer at its end. The reader only tracks structure; whether the text is valid JSON
 * is for the final parse to say. */
#ifndef PM_SRV_CALL_READER_H
#define PM_SRV_CALL_READER_H

#include <stddef.h>

enum { SRV_CALL_NAME_MAX = 64, SRV_CALL_MAX = 1024 };

typedef struct srv_call_part {
    char name[SRV_CALL_NAME_MAX + 1];
    int name_len, name_done;        /* name_done: its string closed */
    char *args;                     /* the arguments so far, whitespace outside strings dropped (malloc'd) */
    size_t args_len, args_cap;
    int args_begun, args_done;
    /* a stream's writer (sse.c): what has gone out */
    int header_sent;
    size_t args_sent;
} srv_call_part;

typedef struct srv_call_reader {
    size_t pos;                     /* the offset in the text read up to (set by the first read) */
    int started, state;             /* state: 0 before the value, 1 in it, 2 after it, -1 bad */
    int list, depth, in_str, esc, expect_key, member, in_key;
    char key[12];
    int key_len;
    srv_call_part *calls;
    int n, cap;
} srv_call_reader;

/* Reads text[from..to) past what it read before (from: where the calls begin, the same each
 * time; text grows only at its end). Memory running out makes the reader bad. */
void srv_call_reader_read(srv_call_reader *r, const char *text, size_t from, size_t to);

/* 1 when it read a whole list (or call) with every call's name and arguments. */
int srv_call_reader_complete(const srv_call_reader *r);

void srv_call_reader_free(srv_call_reader *r);

#endif
