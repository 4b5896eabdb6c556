/* tokenizer.h — the text tokenizer of phi4mm: byte-level BPE read from a checkpoint's tokenizer.json.
 *
 * Phi-4-multimodal uses OpenAI's o200k_base ranks plus the Phi special tokens, stored in Hugging Face's
 * tokenizer.json format. Encoding: added tokens are matched whole first (also inside user text, as HF does by
 * default), the text between them is split by the pre-tokenizer regex (PCRE2, widened to Unicode 16 tables), each
 * piece is mapped byte by byte to the GPT-2 byte alphabet and merged by BPE in merge-rank order. Invalid UTF-8 input
 * is repaired first (one U+FFFD per maximal ill-formed subsequence). Decoding concatenates token bytes and applies
 * the same lossy UTF-8 rule; the streaming decoder emits only complete characters.
 *
 * A loaded pm_tokenizer is immutable: every function taking a const pointer may be called from several threads. */
#ifndef PM_TOK_TOKENIZER_H
#define PM_TOK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct pm_tokenizer pm_tokenizer;

/* Loads model_dir/tokenizer.json. Rejects a file whose model is not BPE or whose vocabulary is not byte-level
 * (GPT-2 byte alphabet), unsupported normalizers/pre-tokenizers, and merges that name unknown tokens. */
int pm_tok_load(pm_tokenizer **out, const char *model_dir, pm_err *e);
/* Same, from a tokenizer.json path (or any path to such a file). */
int pm_tok_load_file(pm_tokenizer **out, const char *json_path, pm_err *e);
void pm_tok_free(pm_tokenizer *t);

/* Encodes text[0..len) into *ids (malloc'd; *n_ids may be 0, then *ids is still a valid allocation). With
 * allow_special = 1 added tokens are matched as whole units first (HF default); with 0 the special ones are plain
 * text (tiktoken encode_ordinary, HF split_special_tokens=True). No BOS/EOS is added. */
int pm_tok_encode(const pm_tokenizer *t, const char *text, size_t len, int allow_special, int32_t **ids,
                  size_t *n_ids, pm_err *e);
/* Same, but stops with PM_ELIMIT as soon as the text has made more than max_ids ids (0: no limit), so that a
 * prompt far over a context limit costs little (a 45 MB body of CJK text was 28 M tokens, 11 s and 1.3 GB to
 * encode whole). A pre-tokenizer piece is encoded whole before the count is checked, unless its length alone
 * (over the longest vocabulary token) proves it too many. */
int pm_tok_encode_max(const pm_tokenizer *t, const char *text, size_t len, int allow_special, size_t max_ids, int32_t **ids,
                      size_t *n_ids, pm_err *e);
/* The benchmark baseline: same result as pm_tok_encode(allow_special = 1) but with a deliberately naive BPE
 * (rescans every pair after each merge, no cached ranks: O(n^2) lookups per piece). */
int pm_tok_encode_naive(const pm_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids, pm_err *e);

/* Decodes ids into *out (malloc'd, NUL-terminated, *out_len bytes): concatenated token bytes (an added token gives
 * its content), lossy UTF-8, BOM kept. skip_special drops special added tokens. Ids the tokenizer does not know
 * (unused reserved ids, out of range, negative) decode to nothing, as in HF. */
int pm_tok_decode(const pm_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out, size_t *out_len,
                  pm_err *e);

/* Id of a token string: an added token's content, else a vocabulary entry in tokenizer.json's byte-level spelling
 * ("Ġthe"); -1 if none. */
int pm_tok_id(const pm_tokenizer *t, const char *token_text);
/* 1 if id is an added token flagged special (dropped by skip_special), else 0. */
int pm_tok_is_special(const pm_tokenizer *t, int32_t id);
/* Max id + 1 known to the tokenizer (vocabulary and added tokens). */
int32_t pm_tok_vocab_size(const pm_tokenizer *t);
/* The raw bytes of one token (an added token's UTF-8 content); NULL with *len = 0 for an unknown id. */
const char *pm_tok_token_bytes(const pm_tokenizer *t, int32_t id, size_t *len);
/* Every id's bytes below vocab as a held output may take them: *tokens[id] (NULL with len 0 for a
 * special token or an unknown id, which none may write) and *len[id], both malloc'd (the bytes stay
 * the tokenizer's). 0, or -1 out of memory (nothing allocated). The byte tries and indexes of
 * grammars and guided patterns are built from them. */
int pm_tok_plain_bytes(const pm_tokenizer *t, int vocab, const char ***tokens, size_t **len);

/* Streaming detokenizer: feed ids one by one, get the complete UTF-8 text available so far. */
typedef struct pm_tok_stream pm_tok_stream;
/* Returns NULL only when out of memory. The tokenizer must outlive the stream. */
pm_tok_stream *pm_tok_stream_new(const pm_tokenizer *t, int skip_special);
/* Adds one token; *text (malloc'd, may be "") gets the characters completed by it; an incomplete trailing
 * sequence is held back, bytes known to be invalid become U+FFFD at once. Caller frees *text. */
int pm_tok_stream_push(pm_tok_stream *s, int32_t id, char **text, size_t *len, pm_err *e);
/* End of input: the held-back tail, if any, as U+FFFD. The stream is then empty and may be reused. */
int pm_tok_stream_flush(pm_tok_stream *s, char **text, size_t *len, pm_err *e);
void pm_tok_stream_free(pm_tok_stream *s);

#endif
