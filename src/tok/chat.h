/* chat.h — prompt text around the tokenizer: the Phi-4-mini chat template and the multimodal placeholders.
 *
 * The template (tokenizer_config.json of Phi-4-mini / Phi-4-multimodal) renders each message as
 * <|role|>content<|end|> — a system message with tools as <|system|>content<|tool|>tools<|/tool|><|end|> — with no
 * BOS and nothing between turns, then <|assistant|> (generation prompt) or the eos text <|endoftext|>.
 * Placeholders <|image_N|>/<|audio_N|> are not tokens: the official processor rewrites them to <|endoftext10|> /
 * <|endoftext11|> (ids 200010/200011), tokenizes, then repeats each placeholder id by its media item's token count,
 * media taken in order of appearance. phi4mm additionally checks the numbering (N = 1..k in order, k = media count). */
#ifndef PM_TOK_CHAT_H
#define PM_TOK_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum { PM_TOK_IMAGE_ID = 200010, PM_TOK_AUDIO_ID = 200011 };

typedef struct pm_chat_msg {
    const char *role;
    const char *content;
    const char *tools; /* tools may be NULL */
} pm_chat_msg;

/* What follows the messages: the template's else branch (the eos text), its generation prompt <|assistant|>, or
 * nothing, the final message left open right after its content (no <|end|>, no tools block) for the model to go on
 * with (Hugging Face's continue_final_message, which cuts the rendered text there: an answer's prefill). */
enum { PM_CHAT_END_EOS = 0, PM_CHAT_GENERATE = 1, PM_CHAT_CONTINUE = 2 };

/* Renders msgs[0..n) with the Phi-4-mini template into *out (malloc'd); end is a PM_CHAT_* above. Roles are free
 * text (as in the template); a NULL role or content, n < 0, or PM_CHAT_CONTINUE without a message is PM_EINVAL. */
int pm_chat_render(const pm_chat_msg *msgs, int n, int end, char **out, pm_err *e);

/* Validates <|image_N|>/<|audio_N|> (per kind, N must run 1..k in order of appearance and k must equal the media
 * count given; errors name the missing, duplicated, out-of-order or surplus placeholder) and rewrites them to
 * <|endoftext10|> / <|endoftext11|>. *out is malloc'd. N is read as the official regex reads it (\d+). */
int pm_prompt_rewrite_placeholders(const char *prompt, int n_images, int n_audios, char **out, pm_err *e);

/* Replaces each 200010 with image_tokens[k] copies (k-th image in order) and each 200011 with audio_tokens[k]
 * copies (*out malloc'd). Legacy ids are normalised first: id <= -10000 -> 200011, -9999..-1 -> 200010. Errors if the
 * number of placeholder ids of a kind differs from its media count or a token count is < 1. */
int pm_expand_placeholders(const int32_t *ids, size_t n, const int *image_tokens, int n_images, const int *audio_tokens,
                           int n_audios, int32_t **out, size_t *n_out, pm_err *e);

#endif
