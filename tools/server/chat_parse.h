/* chat_parse.h — a /v1/chat/completions request body (already parsed JSON) to what the engine
 * needs: the full chat-templated prompt with <|image_N|>/<|audio_N|> placeholders, the media
 * bytes in placeholder order, and the generation parameters. Pure: no engine, no network.
 *
 * Placeholders. By default each image_url / input_audio part becomes <|image_N|> / <|audio_N|>
 * exactly where the part stands in its message, numbered per kind across the whole conversation
 * in order of appearance, text parts concatenated around them with nothing added (the official
 * examples write "<|image_1|>Describe the image."). When any text already contains such a
 * placeholder the request is in "explicit" mode: parts add none, and the text's placeholders must
 * number 1..k for the k media of each kind (else 400, code "placeholder_mismatch"). */
#ifndef PM_SRV_CHAT_PARSE_H
#define PM_SRV_CHAT_PARSE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "server.h"
#include "tool_calls.h"

enum { SRV_MAX_STOP = 4, SRV_MAX_STOP_LEN = 256, SRV_MAX_MESSAGES = 4096, SRV_MAX_CHOICES = 16 };

/* Media bytes as received (decoded from base64, or read from an allowed local file). */
typedef struct srv_blob {
    uint8_t *data;
    size_t len;
    char what[64];      /* "messages[1].content[0]" for error messages */
    char format[16];    /* input_audio format, or the image's media type subtype */
} srv_blob;

typedef struct srv_parse_limits {
    int max_images, max_audios;
    size_t max_media_bytes;        /* per item */
    const char *media_dir;         /* NULL: local paths refused */
    const struct srv_fetch_table *fetched; /* remote image URLs fetched for the request (media_urls.h); NULL: none */
} srv_parse_limits;

typedef struct srv_chat_req {
    char *prompt;                  /* malloc'd, full template; NULL for a token-id prompt */
    int32_t *prompt_ids;           /* completions: a prompt of token ids (malloc'd), n_prompt_ids of them */
    int n_prompt_ids;
    srv_blob *images, *audios;     /* malloc'd arrays */
    int n_images, n_audios;
    int explicit_placeholders;
    int n;                         /* choices (samples) asked, 1..SRV_MAX_CHOICES */
    int max_tokens;                /* 0: not given */
    pm_sampling sampling;          /* with the penalties */
    pm_logit_bias *logit_bias;     /* malloc'd, n_logit_bias of them */
    int n_logit_bias;
    pm_format format;              /* response_format (text, json_object, json_schema) or vLLM's guided decoding (regex) */
    char *json_schema;             /* with json_schema: the schema as JSON text (malloc'd) */
    char *guide;                   /* with regex: the pattern (guided_choice's list as an escaped alternation); with grammar: the GBNF (malloc'd) */
    int min_tokens, ignore_eos;    /* the end tokens banned until min_tokens, or always */
    char *cache_salt;              /* cache_salt (vLLM's): the prompt and media caches' scope (malloc'd; NULL: none) */
    int max_crops;                 /* mm_processor_kwargs.dynamic_hd (vLLM's): HD crops per image at most (0: the server's) */
    char *prediction;              /* prediction.content (OpenAI's Predicted Outputs), its text parts joined (malloc'd; NULL: none) */
    srv_tool_mode tool_mode;       /* chat tools (tool_calls.h): off, auto or forced (then format is its schema) */
    char *tools_text;              /* the tools' JSON list the system message carries (malloc'd) */
    int seed_given;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int32_t *stop_ids;             /* stop_token_ids (vLLM's; malloc'd), n_stop_ids of them */
    int n_stop_ids;
    int stop_in_output;            /* include_stop_str_in_output (vLLM's) */
    int keep_special;              /* skip_special_tokens false (vLLM's) */
    int tokens_as_ids;             /* return_tokens_as_token_ids (vLLM's) */
    int truncate_prompt;           /* truncate_prompt_tokens (vLLM's): pm_request.truncate_prompt */
    int32_t *allowed_ids;          /* allowed_token_ids (vLLM's; malloc'd), n_allowed_ids of them */
    int n_allowed_ids;
    char **bad_words;              /* bad_words (vLLM's; malloc'd strings), n_bad_words of them */
    int n_bad_words;
    int chat_end;                  /* chat: what follows the messages (PM_CHAT_GENERATE, _END_EOS, _CONTINUE: tok/chat.h) */
    int chat_echo;                 /* chat: echo (vLLM's) asked */
    char *echo_text;               /* ... the final assistant message's text, the answer's start (malloc'd; NULL: none) */
    int stream, include_usage;
    int continuous_usage;          /* stream_options.continuous_usage_stats (vLLM's): every chunk its choice's usage so far */
    int logprobs, top_logprobs;    /* log-probabilities asked (chat: logprobs true; completions: logprobs N) and alternatives */
    int prompt_logprobs, prompt_top; /* vLLM's prompt_logprobs: the prompt's tokens scored, with prompt_top alternatives */
    int echo;                      /* completions: the prompt comes back before the completion (with logprobs, scored) */
    int score_only;                /* completions: echo with max_tokens 0: the prompt back, nothing generated */
} srv_chat_req;

/* Validates root and fills out (zeroed first). Returns 0, or -1 with e set (400 for every
 * request mistake; e->param names the field as "messages[2].content[0].image_url.url"). Free out
 * with srv_chat_req_free in both cases. */
int srv_chat_parse(const json_t *root, const srv_parse_limits *lim, srv_chat_req *out, srv_error *e);
void srv_chat_req_free(srv_chat_req *r);

/* A /v1/completions body: the prompt (a string, an array of one, token ids, or an array of one
 * array of token ids) goes to the model as it is, no chat template and no media (a placeholder in
 * it is a 400, code "placeholder_mismatch"; a placeholder id is refused when the model sees it); the
 * generation parameters as for chat, logprobs the count of alternatives (0..5), echo (with
 * max_tokens 0 allowed beside it), suffix and best_of refused.
 * Fills out like srv_chat_parse (free it with srv_chat_req_free). */
int srv_completion_parse(const json_t *root, int which, srv_chat_req *out, srv_error *e);
/* The body's top-level fields that neither route reads (a misspelt "max_token", a parameter of
 * another server): how many, and their names in out ("a, b", cut short with "..." past cap). vLLM
 * logs such fields; OpenAI refuses them (serve --strict-params). Bytes outside printable ASCII in
 * a name become '?' (the list goes into a header and a log line); an empty name is `""`. */
int srv_ignored_fields(const json_t *root, int completions, char *out, size_t cap);
/* The same for any route: root's fields in none of lists (NULL-terminated lists of NULL-terminated
 * name lists); 0 when root is no object. */
int srv_unread_fields(const json_t *root, const char *const *const *lists, char *out, size_t cap);
/* 1 when name is in one of lists. */
int srv_field_listed(const char *name, const char *const *const *lists);
/* Appends name to the list in out (as above: ", " between, "..." once past cap, printable ASCII). */
void srv_field_note(const char *name, char *out, size_t cap);
/* How many prompts a /v1/completions body holds (an array of strings or of id arrays: its length;
 * else 1): srv_completion_parse reads prompt `which` of them with the same parameters. */
int srv_completion_prompts(const json_t *root);

/* Returns 1 when text contains a well-formed <|image_N|> or <|audio_N|> (N = digits). */
int srv_has_placeholder(const char *text);

#endif
