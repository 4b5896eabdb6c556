/* phi4mm.h — public C API of the phi4mm inference engine for Phi-4-multimodal-instruct.
 *
 * Conventions: every fallible call returns PM_OK (0) or a negative PM_E* status and fills a
 * caller-provided message buffer; handles are opaque; nothing here calls exit(). The mode
 * (adapter, audio-projection branch) and the media of a request belong to its sequence, never
 * to the process: sequences of different modes may run in the same batch. */
#ifndef PHI4MM_H
#define PHI4MM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version: the API is what this header declares at it. pm_version() gives the
 * version of the library linked, which a program built against another header can compare. */
#define PM_VERSION_MAJOR 0
#define PM_VERSION_MINOR 39
#define PM_VERSION_PATCH 0
#define PM_VERSION "0.39.0"
const char *pm_version(void);

/* Status codes (negative = failure). */
enum {
    PM_OK = 0,
    PM_EINVAL = -1,       /* bad argument or bad user input (prompt, media) */
    PM_EIO = -2,          /* a file could not be opened, read or mapped */
    PM_EFORMAT = -3,      /* a file or payload is malformed (safetensors, JSON, WAV, PNG, ...) */
    PM_ENOMEM = -4,       /* allocation failed */
    PM_EUNSUPPORTED = -5, /* valid but not supported (dtype, model type, format) */
    PM_ELIMIT = -6,       /* over a configured cap (duration, pixels, clips, tokens, body size) */
    PM_ESTATE = -7,       /* API misuse or internal state error */
    PM_ECANCELED = -8,    /* the request was cancelled */
    PM_EBUSY = -9,        /* no capacity right now (queue full) */
    PM_ECONTEXT = -10,    /* the prompt plus max_tokens exceed the context (OpenAI's context_length_exceeded) */
    PM_EPLACEHOLDER = -11 /* the prompt's <|image_N|> / <|audio_N|> placeholders do not match the media sent */
};

/* Input modes, numbered as the official code numbers them. */
typedef enum pm_mode {
    PM_MODE_LANGUAGE = 0,
    PM_MODE_VISION = 1,
    PM_MODE_SPEECH = 2,
    PM_MODE_VISION_SPEECH = 3
} pm_mode;

/* Which LoRA adapter a sequence uses: chosen from its mode, fixed for its whole life. */
typedef enum pm_adapter { PM_ADAPTER_NONE = 0, PM_ADAPTER_SPEECH = 1, PM_ADAPTER_VISION = 2 } pm_adapter;

const char *pm_status_name(int status);

/* ---------------------------------------------------------------- model */

typedef struct pm_model pm_model;

/* Loads an official Hugging Face checkpoint directory as it is (config.json, generation_config.json,
 * preprocessor_config.json, tokenizer.json, model*.safetensors). Weights stay mmap'd bf16; every
 * tensor is shape-checked and must be used by some module. */
int pm_model_load(pm_model **out, const char *dir, char *err, size_t errlen);
void pm_model_free(pm_model *m);

/* Weight formats of the decoder's base projections and lm_head. BF16: the checkpoint's own bytes,
 * exact parity. Q8 (opt-in): block-scaled int8 copies made at load (32 weights per fp32 scale);
 * decode reads 44% fewer bytes; outputs agree with bf16 closely but not bit for bit. */
typedef enum pm_weight_format { PM_WEIGHTS_BF16 = 0, PM_WEIGHTS_Q8 = 1 } pm_weight_format;
typedef struct pm_load_options {
    pm_weight_format weights;
    /* 1: lock the mapped checkpoint in memory (mlock) at load, so that the page cache cannot drop
     * the weights between decode steps (each dropped page is read back from disk). Needs
     * RLIMIT_MEMLOCK (ulimit -l) above the checkpoint's size, or CAP_IPC_LOCK; refused: a load
     * error. Loading takes longer (every page is read in). */
    int mlock;
    /* 1: before anything else, evict the checkpoint's cached pages that no process maps and read
     * the shards again through a MADV_HUGEPAGE mapping, so that the page cache holds them in 2 MB
     * folios which decode streams faster (README, "Huge pages"). Costs one read of the checkpoint
     * from disk; worth it once after a download or copy left it cached in 4 KB pages. */
    int recache;
    /* 1: products of many rows (prompt prefill, the Conformer, SigLIP, the projections) round their
     * inputs to bf16 and multiply bf16 pairs with fp32 accumulation, as a bf16 model on a GPU does:
     * up to 2 x the arithmetic where the CPU has AVX512-BF16 (elsewhere nothing changes; see
     * pm_model_info.compute_bf16). Decode steps (few rows) keep fp32 inputs. Outputs agree with the
     * default closely but not bit for bit (phi4mm parity --compute bf16). */
    int compute_bf16;
} pm_load_options;
/* pm_model_load with options (NULL = defaults). */
int pm_model_load_opts(pm_model **out, const char *dir, const pm_load_options *opts, char *err, size_t errlen);
/* "bf16" | "q8" -> format; -1 for anything else. */
int pm_weight_format_parse(const char *s, pm_weight_format *out);
const char *pm_weight_format_name(pm_weight_format f);
/* The format a model was loaded with. */
pm_weight_format pm_model_weights(const pm_model *m);

typedef struct pm_model_info {
    int vocab, hidden, n_layers, n_heads, n_kv_heads, head_dim, intermediate;
    int max_position, original_max_position;
    int speech_lora_r, vision_lora_r;
    int audio_dim, audio_blocks, vision_dim, vision_layers;
    int n_tensors, n_shards;
    size_t weight_bytes;
    double load_seconds;
    pm_weight_format weights;
    size_t q8_bytes;         /* int8 weights + scales held in memory (Q8), else 0 */
    size_t recache_bytes, recache_huge_bytes; /* pm_load_options.recache: bytes re-read, of which mapped in 2 MB pages */
    int compute_bf16;        /* pm_load_options.compute_bf16 asked and the CPU has AVX512-BF16: bf16 products in use */
} pm_model_info;
void pm_model_get_info(const pm_model *m, pm_model_info *info);
/* The raw bytes of a token of the model's vocabulary (byte-level BPE: not always whole UTF-8
 * characters); NULL with *len = 0 for an id outside it. */
const char *pm_model_token_bytes(const pm_model *m, int32_t id, size_t *len);
/* The id of the added token whose text is exactly text ("<|tool_call|>"), or of a vocabulary entry in
 * tokenizer.json's byte-level spelling; -1 when there is none. */
int32_t pm_model_token_id(const pm_model *m, const char *text);
/* Tokenizes text[0, len) as the checkpoint's tokenizer.json does (Hugging Face's tokenizer(text):
 * added tokens such as <|endoftext|> and <|user|> matched whole, no BOS, no chat template, and no
 * media placeholders: <|image_1|> is plain text here). *ids is malloc'd (a valid allocation also
 * when *n is 0). */
int pm_model_tokenize(const pm_model *m, const char *text, size_t len, int32_t **ids, size_t *n, char *err, size_t errlen);

/* ---------------------------------------------------------------- media */

typedef struct pm_audio_in {
    const double *samples;  /* mono, scaled like soundfile.read (int16 / 32768) */
    size_t n_samples;
    int sample_rate;
} pm_audio_in;

typedef struct pm_image_in {
    const uint8_t *rgb;     /* RGB8 rows */
    int width, height;
} pm_image_in;

/* Decode an audio file's bytes (WAV/FLAC/OGG/MP3, M4A/MP4, WebM/Matroska) or an image's bytes
 * (PNG/JPEG/WebP/GIF/BMP). `what`
 * names the input in error messages. The samples / pixels are malloc'd; free with the _free calls. */
int pm_audio_decode(const void *bytes, size_t len, const char *what, pm_audio_in *out, char *err, size_t errlen);
/* Same, but refuses (PM_ELIMIT, "... over the limit of S s ...") a clip longer than max_seconds while
 * decoding, before it is whole: use it for untrusted bytes with limits.max_audio_seconds, since a
 * compressed payload can decode to thousands of times its size. max_seconds <= 0: no limit. */
int pm_audio_decode_max(const void *bytes, size_t len, const char *what, double max_seconds, pm_audio_in *out, char *err,
                        size_t errlen);
/* A gate on the memory a decoder allocates for untrusted media, for a caller that shares a budget
 * among many decodes (the server): adjust(user, +n) before n more bytes of samples / pixels are
 * allocated (return 0 to allow; 1: not now, the decode fails with PM_EBUSY; 2: never, PM_ELIMIT),
 * adjust(user, -n) when bytes are given back. On success the bytes taken equal what the output
 * holds (give them back when freeing it); on failure all were given back. */
typedef struct pm_media_gate {
    int (*adjust)(void *user, int64_t delta);
    void *user;
} pm_media_gate;
int pm_audio_decode_gated(const void *bytes, size_t len, const char *what, double max_seconds, const pm_media_gate *gate,
                          pm_audio_in *out, char *err, size_t errlen);
int pm_image_decode_gated(const void *bytes, size_t len, const char *what, int64_t max_pixels, const pm_media_gate *gate,
                          pm_image_in *out, char *err, size_t errlen);
void pm_audio_in_free(pm_audio_in *a);

/* Long-form transcription: where to cut a clip into pieces of at most max_seconds (>= 1) each, for
 * one request a piece (the model card gives 40 s for the best recognition; the official code has no
 * long-form mode). Pieces are balanced (about length / ceil(length / max_seconds) each) and every cut
 * sits at the quietest 200 ms within 2 s of its target. A clip that fits is one piece. Returns the
 * number of pieces, their sample ranges [start, end) in a malloc'd *out covering the clip in order;
 * -1 on bad arguments or out of memory. */
typedef struct pm_audio_span {
    size_t start, end;
} pm_audio_span;
int pm_audio_split(const pm_audio_in *a, double max_seconds, pm_audio_span **out);
int pm_image_decode(const void *bytes, size_t len, const char *what, int64_t max_pixels, pm_image_in *out, char *err,
                    size_t errlen);
void pm_image_in_free(pm_image_in *im);

/* Bytes of memory this process may use: physical memory, or its cgroup's memory.max when lower;
 * 0 when neither can be read. The automatic budgets (KV cache, the server's decoded media) are
 * fractions of it. */
int64_t pm_memory_limit(void);

/* ---------------------------------------------------------------- requests */

typedef struct pm_limits {
    double max_audio_seconds;      /* per request, all clips together (default 1800 = 30 min) */
    int max_audio_clips;           /* default 16 */
    int max_images;                /* default 16 */
    int64_t max_image_pixels;      /* default 40,000,000 per image */
    int max_context;               /* prompt + completion tokens per sequence (default: max_position) */
} pm_limits;
void pm_limits_default(pm_limits *l);

typedef struct pm_sampling {
    float temperature;  /* <= 0: greedy */
    int top_k;          /* <= 0: off */
    float top_p;        /* >= 1: off */
    uint64_t seed;
    /* min-p (0..1, 0: off): after top-k and top-p, only the tokens at least min_p times as likely
     * as the most likely one (Hugging Face's MinPLogitsWarper, vLLM's and llama.cpp's min_p). */
    float min_p;
    /* Penalties, applied to the logits before temperature, top-k and top-p (0: off). OpenAI's:
     * each token already generated loses frequency_penalty for every time it was generated and
     * presence_penalty once. Hugging Face's repetition_penalty (> 1 discourages): a token of the
     * prompt or the output has its logit divided by it when positive, multiplied when not. */
    float frequency_penalty;
    float presence_penalty;
    float repetition_penalty;
} pm_sampling;

/* A bias added to one token's logit before the penalties (OpenAI's logit_bias: -100 bans the
 * token in practice, 100 forces it). */
typedef struct pm_logit_bias {
    int32_t token;
    float bias;
} pm_logit_bias;
enum { PM_MAX_LOGIT_BIAS = 1024, PM_MAX_STOP_IDS = 1024, PM_MAX_ALLOWED_IDS = 1 << 18, PM_MAX_BAD_WORDS = 256, PM_MAX_BAD_WORD_BYTES = 256 };

/* A token, its log-probability under the model and its rank there: 1 + how many tokens the model
 * found more likely (vLLM's; tokens as likely share one). rank 0: not scored (a prompt's first). */
typedef struct pm_logprob {
    int32_t token;
    float logprob;
    int32_t rank;
} pm_logprob;
enum { PM_MAX_TOP_LOGPROBS = 20 };

typedef enum pm_format {
    PM_FORMAT_TEXT = 0,
    PM_FORMAT_JSON_OBJECT = 1,
    PM_FORMAT_JSON_SCHEMA = 2,
    PM_FORMAT_REGEX = 3,  /* the whole answer matches pm_request.regex (vLLM's guided_regex) */
    PM_FORMAT_CHOICE = 4, /* the answer is one of pm_request.choices (vLLM's guided_choice) */
    PM_FORMAT_GRAMMAR = 5 /* the whole answer is a root of pm_request.grammar (vLLM's guided_grammar, llama.cpp's grammar) */
} pm_format;
enum { PM_MAX_CHOICES = 4096 };

typedef struct pm_request {
    const char *prompt;          /* full chat-formatted prompt with <|image_N|>/<|audio_N|>; NULL when ids are given */
    const int32_t *ids;          /* or: token ids with one placeholder per media item (legacy negative ids allowed) */
    size_t n_ids;
    const pm_audio_in *audios;
    int n_audios;
    const pm_image_in *images;
    int n_images;
    int max_tokens;              /* completion tokens (> 0; 0 only with prompt_logprobs) */
    pm_sampling sampling;
    const char *const *stop;     /* optional stop strings */
    int n_stop;
    /* Optional token ids that end the request when sampled (vLLM's stop_token_ids), each in [0, vocab),
     * at most PM_MAX_STOP_IDS: the token counts as generated (its log-probabilities reported as any
     * other's), its text is left out unless stop_in_output, and the request finishes PM_FINISH_STOP.
     * Banned until min_tokens as the end tokens are; ignore_eos leaves them be. */
    const int32_t *stop_ids;
    int n_stop_ids;
    /* 1: what ended the request stays in the text (vLLM's include_stop_str_in_output): the stop
     * string, the stop token's text, the end token's (a special token's only with keep_special). */
    int stop_in_output;
    /* 1: special added tokens give their text (<|tool_call|>, ...) instead of nothing (vLLM's
     * skip_special_tokens false); the official decode drops them (0). */
    int keep_special;
    /* Optional: only these tokens may come (vLLM's allowed_token_ids; each in [0, vocab), at most
     * PM_MAX_ALLOWED_IDS); an end token only where listed (else the answer runs to max_tokens). */
    const int32_t *allowed_ids;
    int n_allowed_ids;
    /* Optional: words the answer never writes (vLLM's bad_words, at most PM_MAX_BAD_WORDS of 1..
     * PM_MAX_BAD_WORD_BYTES bytes besides leading whitespace): each tokenized as it would stand at
     * the answer's start and after a space; the last token of such a sequence is banned wherever
     * the answer ends with the tokens before it (a one-token word always). Another tokenization of
     * the same text (the model spelling it in smaller pieces) is not caught, as in vLLM. */
    const char *const *bad_words;
    int n_bad_words;
    /* Optional: only the prompt's last truncate_prompt tokens go to the model (vLLM's
     * truncate_prompt_tokens: left truncation, the template's beginning included); -1: as many as
     * fit beside max_tokens in the context; 0: the whole prompt (too long: refused). Only for
     * prompts without images or audio (a cut placeholder would leave a media item half there). */
    int truncate_prompt;
    /* Optional: asked between encoder blocks (each Conformer block, each SigLIP layer) while the
     * request's media are encoded; non-zero gives up with PM_ECANCELED (a client gone, a server
     * stopping). From the encoding thread. */
    int (*should_stop)(void *user);
    void *stop_user;
    /* Log-probabilities: with logprobs != 0 (or top_logprobs > 0) each generated token's comes
     * through pm_callbacks.on_logprobs, with the top_logprobs (0..PM_MAX_TOP_LOGPROBS) most likely
     * tokens. They are the model's own: log-softmax of the logits, before logit biases, penalties,
     * temperature, top-k and top-p (greedy decoding without biases or penalties picks the first of
     * the top ones). */
    int logprobs;
    int top_logprobs;
    /* 1: the end-of-sequence token that ends the request gets its on_logprobs report too (it adds no
     * text): a scoring client that slices "prompt + one generated token" needs that entry. */
    int logprobs_eos;
    /* 1: also score the prompt: each prompt token after the first gets its log-probability under
     * the tokens before it, with top_logprobs alternatives, through
     * pm_callbacks.on_prompt_logprobs before anything is generated (what OpenAI's echo with
     * logprobs returns, and what evaluation harnesses read). Costs an lm_head pass per prompt row.
     * With it max_tokens may be 0: the prompt is scored and the request ends (PM_FINISH_LENGTH). */
    int prompt_logprobs;
    /* With prompt_logprobs: the first position scored and reported (0, default: all, position 0's
     * unscored entry included). The positions before it cost no lm_head pass, and the prompt cache
     * may supply their rows (a scorer of overlapping windows keeps only each window's new tokens). */
    int prompt_logprobs_from;
    /* Optional per-token logit biases (tokens < vocab, at most PM_MAX_LOGIT_BIAS; a token listed
     * twice adds both); copied at submit. */
    const pm_logit_bias *logit_bias;
    int n_logit_bias;
    /* PM_FORMAT_JSON_OBJECT: the output is held to a JSON object (OpenAI's JSON mode): each step
     * only the tokens that keep it a prefix of one may come, and the end token only once it is
     * complete (then nothing else). PM_FORMAT_JSON_SCHEMA: to a value of json_schema (JSON text;
     * the keywords and the subset of instances it is held to: src/engine/json_schema.h; a schema
     * it cannot hold an answer to is refused at submit). A request cut by max_tokens or a stop
     * string ends mid-value. */
    pm_format format;
    const char *json_schema;
    /* PM_FORMAT_REGEX: a regular expression the whole answer must match (the syntax, and what is
     * refused: src/engine/regex.h); PM_FORMAT_CHOICE: choices[0, n_choices) (1..PM_MAX_CHOICES),
     * literal strings, one of which the answer is. Each step only the tokens that keep the output
     * a prefix of a match may come, the end token only where it is a whole match, and nothing
     * once no more can follow. The pattern is compiled into a DFA where the request is encoded; a
     * pattern whose DFA would be too large is refused (PM_EUNSUPPORTED) rather than held loosely. */
    const char *regex;
    const char *const *choices;
    int n_choices;
    /* PM_FORMAT_GRAMMAR: a context-free grammar in GBNF (llama.cpp's notation: `root ::= ...`) or
     * Lark's (`start: ...`), told apart by the first definition (the notations, and what is
     * refused: src/engine/grammar.h), held as a pattern is: each step only the tokens after which
     * the answer can still become a root, the end token only where it is one. A grammar that is
     * left-recursive (other than directly) or whose parse outgrows the limits is refused at submit
     * (PM_EINVAL); one that turns out too ambiguous while decoding ends the request with an error. */
    const char *grammar;
    /* Lazy (with format JSON_OBJECT or JSON_SCHEMA and json_lazy != 0): the answer is free until
     * the model itself writes the token json_open; what follows is held to a value as above, after
     * which only json_close or an end token may come, and either ends the request (its text is the
     * model's, markers included as their tokens). This is how a chat server holds tool calls with
     * tool_choice auto, which Phi-4 writes as <|tool_call|>[...]<|/tool_call|>, to their schema
     * without forcing one. Both tokens in [0, vocab), different. */
    int json_lazy;
    int32_t json_open, json_close;
    /* The end tokens are banned (logit -inf) until min_tokens tokens have come, or for the whole
     * request with ignore_eos (as llama.cpp's ignore_eos and vLLM's min_tokens): it then runs to
     * max_tokens or a stop string. A complete JSON value still ends a JSON-mode request. */
    int min_tokens;
    int ignore_eos;
    /* Optional: the prompt and media caches (pm_engine_opts.prefix_cache) keep this request's
     * entries apart: only a request with the same salt reuses them, and it reuses no one else's
     * (vLLM's cache_salt: on a server shared by several clients a cache hit shows in the time to
     * the first token, so each tenant salts with a secret of its own). NULL or "": the unsalted
     * entries; at most PM_MAX_CACHE_SALT bytes. */
    const char *cache_salt;
    /* Optional: at most this many HD crops per image (1..4096; the processor's dynamic_hd, which
     * vLLM takes per request as mm_processor_kwargs): fewer crops, fewer image tokens (a 1344x896
     * image: 1,841 at the checkpoint's 36, 460 at 1). 0: the checkpoint's preprocessor_config.json
     * dynamic_hd, as the official processor. */
    int max_crops;
    /* Optional: text the answer is expected to repeat much of (OpenAI's Predicted Outputs: the file
     * an edit rewrites, say), at most PM_MAX_PREDICTION bytes. While the sequence decodes alone, the
     * tokens that follow the answer's end in it are drafted and checked as pm_engine_opts.draft_tokens'
     * are (at most that many, PM_PREDICTION_DRAFT when drafting is off): the same tokens and bits as
     * without it, in fewer passes over the weights where the prediction holds. */
    const char *prediction;
} pm_request;
enum { PM_MAX_PREDICTION = 4 << 20, PM_PREDICTION_DRAFT = 8 };
enum { PM_MAX_CACHE_SALT = 256 };

/* The mode the official policy assigns to a request: image and audio -> VISION_SPEECH, image ->
 * VISION, audio -> SPEECH, neither -> LANGUAGE. */
pm_mode pm_request_mode(const pm_request *r);

typedef enum pm_finish { PM_FINISH_STOP = 0, PM_FINISH_LENGTH = 1, PM_FINISH_CANCELLED = 2, PM_FINISH_ERROR = 3 } pm_finish;

typedef struct pm_callbacks {
    /* A new token and the complete UTF-8 text it adds (possibly empty). Return non-zero to cancel. */
    int (*on_token)(void *user, int32_t token, const char *text, size_t len);
    /* Called exactly once per accepted request. error is NULL unless reason is PM_FINISH_ERROR. */
    void (*on_done)(void *user, pm_finish reason, int prompt_tokens, int completion_tokens, const char *error);
    void *user;
    /* With pm_request.logprobs: called for each generated token right before its on_token (not for
     * the end-of-sequence token, which adds no text, unless logprobs_eos): its log-probability and
     * the n_top most likely tokens', most likely first (lower id first on ties). Last so that
     * {on_token, on_done, user} initialisers stay valid. */
    void (*on_logprobs)(void *user, pm_logprob chosen, const pm_logprob *top, int n_top);
    /* With pm_request.prompt_logprobs: called once per prompt position (from prompt_logprobs_from
     * on), in order, before the first generated token's callbacks: chosen is the prompt's token at
     * pos (a media row's is its placeholder id) and its log-probability given the positions before
     * it, top the n_top most likely there, as on_logprobs. Position 0 has no context: logprob NAN,
     * n_top 0. */
    void (*on_prompt_logprobs)(void *user, int pos, pm_logprob chosen, const pm_logprob *top, int n_top);
    /* Called once right before on_done: how many of the prompt's positions came from the prompt
     * cache (pm_engine_opts.prefix_cache) instead of being computed (OpenAI's cached_tokens). */
    void (*on_prompt_cached)(void *user, int positions);
    /* With pm_request.prediction: called once right before on_done: the prediction's tokens drafted
     * and those the sampler took (OpenAI's accepted_prediction_tokens; drafted - accepted, its
     * rejected_prediction_tokens). */
    void (*on_prediction)(void *user, int drafted, int accepted);
    /* With pm_request.prompt_logprobs: called for each position scored (from prompt_logprobs_from
     * on, 1 at least), in order, with the n_vocab logits that predict it (the row of pos - 1,
     * before any softmax; valid during the call), as the steps prefill the prompt (pm_engine_submit,
     * pm_generate), before its on_prompt_logprobs reports. What a scorer needs beyond the top
     * alternatives (a KL divergence, a distillation target). A request prefilled before its
     * submission (pm_engine_prefill) has dropped them: pm_engine_submit_encoded refuses it. */
    void (*on_prompt_logits)(void *user, int pos, const float *logits, int n_vocab);
    /* With reason PM_FINISH_ERROR: called once right before on_done with the error's class, a
     * pm_status: PM_ELIMIT where the request's grammar passed a limit while decoding, PM_EINVAL
     * where its own constraints (bans, a grammar) leave no token, PM_ENOMEM, PM_ESTATE or another
     * code where the engine failed. What a server needs to answer the request's fault (4xx) apart
     * from its own (5xx). */
    void (*on_error)(void *user, int code);
} pm_callbacks;

/* ---------------------------------------------------------------- engine */

/* An engine owns the live sequences (their KV caches, adapters, media embeddings). It is not
 * thread-safe: one thread submits and steps; a server queues requests to that thread. */
typedef struct pm_engine pm_engine;

typedef struct pm_engine_opts {
    int max_seqs;        /* sequences decoded together (default 16) */
    /* Prompt rows per step per sequence (default 512); a chunk of at least an eighth of that ends
     * early right after a message's <|end|>, so that a later prompt that shares the messages
     * shares the chunks (the prompt cache reuses whole chunks only; the chunks a prompt gets
     * depend only on its ids, so the tokens do not depend on what was cached). */
    int prefill_chunk;
    pm_limits limits;
    /* KV cache bytes the live sequences may reserve together, each its worst case (prompt after
     * media expansion + max_tokens, in whole pages, plus the prompt's embedding rows and the
     * logits it keeps) from admission to its end: 0 (default) = the
     * memory the process may use less the resident weights and a headroom; < 0 = no limit. A
     * request larger than the budget is refused (PM_ELIMIT); one that does not fit beside the
     * live sequences gets PM_EBUSY before any encoder runs (retry when one has finished). */
    int64_t kv_budget;
    /* LongRoPE: a sequence whose length first passes original_max_position recomputes its whole
     * cache with the long factors (the official generate). 0 (default): pm_engine_step runs that
     * recompute itself, a prefill_chunk at a time, and every other live sequence waits for each
     * chunk. 1: the step parks the sequence instead (it stays live and samples nothing) and the
     * caller runs the recompute beside the steps: pm_engine_take_recompute, pm_engine_prefill on
     * another thread, pm_engine_resume. Same tokens either way. */
    int recompute_beside;
    /* 1: KV caches of bf16 elements instead of fp32: half the memory per position (a 128 K-token
     * context takes 16 GB instead of 32 at Phi-4-mini's dims) and half the bytes a long-context
     * decode step reads, at the cost of rounding K/V to 8 mantissa bits as they are stored (the
     * official model keeps its cache so when it runs in bf16). 0 (default): fp32, which the parity
     * fixtures hold to. */
    int kv_bf16;
    /* Prompt (prefix) cache: the KV of ended sequences' prompts is kept, in whole prefill chunks
     * (up to the last chunk boundary a longer prompt shares: a conversation's last <|end|>),
     * and a later prompt that begins with the same rows (token ids; media rows by content; the
     * same adapter and RoPE factors) starts its prefill past them (src/engine/prefix_cache.h).
     * Exact: the tokens are the same bits as without it. An eighth of it keeps the encoders'
     * outputs of recent media (src/engine/media_cache.h: the same image or clips again skip their
     * encoders). 0 (default): off; > 0: at most this many bytes, on top of kv_budget; < 0: a
     * quarter of the automatic kv_budget, taken from it (off when kv_budget is given). A prompt
     * scored with prompt_logprobs computes every position from prompt_logprobs_from on. */
    int64_t prefix_cache;
    /* Prompt-lookup drafting: while one sequence decodes alone, when its last tokens occurred
     * before (in the prompt or the answer), the up to draft_tokens tokens that followed them there
     * are checked in the same forward as the next token, and each one the sampler would have taken
     * anyway comes out of that one pass over the weights (a decode step at batch 1 reads the whole
     * checkpoint for a token; a few more rows cost little). Exact: the rows of a short chunk are
     * computed as the one-row steps compute them (ops.h), and the tokens are sampled in order from
     * them as the steps would, so the tokens, log-probabilities and random draws are the same bits
     * as without it. 0 (default): off; at most PM_MAX_DRAFT. */
    int draft_tokens;
} pm_engine_opts;
enum { PM_MAX_DRAFT = 15 };
void pm_engine_opts_default(pm_engine_opts *o);

/* What the prompt cache did so far (all 0 when it is off). */
typedef struct pm_prefix_stats {
    int64_t lookups, hits;  /* prompts looked up, and those that started past a kept prefix */
    int64_t reused;         /* positions not computed again */
    int64_t bytes, cap;     /* KV bytes held now, and the cap */
    int entries;
    /* the encoder outputs kept beside it (src/engine/media_cache.h): requests' media looked up
     * (each image, each request's clips together), found, and the bytes held */
    int64_t media_lookups, media_hits, media_bytes;
} pm_prefix_stats;

int pm_engine_new(pm_engine **out, pm_model *m, const pm_engine_opts *opts, char *err, size_t errlen);
void pm_engine_free(pm_engine *eng);
/* Validates the request, runs its media encoders and adds it as a live sequence. On failure
 * nothing is added and no callback fires. On success on_done will fire exactly once. */
int pm_engine_submit(pm_engine *eng, const pm_request *req, const pm_callbacks *cb, int64_t *seq_id, char *err, size_t errlen);
/* The expensive half of pm_engine_submit, for a caller that wants the live sequences to keep
 * decoding while a request's media are encoded: pm_engine_encode validates and plans the request
 * and runs its encoders. It reads only what never changes after pm_engine_new, so one other thread
 * may call it while this one steps (the two share the cores). pm_engine_submit_encoded then adds
 * the result as a live sequence: req must be the request it was encoded from (its sampling,
 * max_tokens and stop strings are read; its media are not), and the engine must have room
 * (PM_EBUSY: full, or the KV budget in use). On success the engine takes enc; on failure it stays
 * the caller's, to retry or free. The tokens are those pm_engine_submit would give. */
typedef struct pm_encoded pm_encoded;
int pm_engine_encode(const pm_engine *eng, const pm_request *req, pm_encoded **out, char *err, size_t errlen);
int pm_engine_submit_encoded(pm_engine *eng, pm_encoded *enc, const pm_request *req, const pm_callbacks *cb, int64_t *seq_id, char *err,
                             size_t errlen);
/* Runs the encoded request's prompt through the decoder into a cache of its own, in the chunks
 * pm_engine_step would run (the same numbers), at most ~max_rows rows per call: 1 when the whole
 * prompt is in, 0 when rows remain (call again: a caller can stop between calls), < 0 on error.
 * Like pm_engine_encode it may run beside pm_engine_step on another thread; once admitted, the
 * sequence samples its first token at its first step, and no step pauses the others for its
 * prefill. */
int pm_engine_prefill(const pm_engine *eng, pm_encoded *enc, int max_rows, char *err, size_t errlen);
/* With opts.recompute_beside: hands out the LongRoPE recompute of one parked sequence as an
 * encoded prompt of all its tokens (its media rows kept), with an empty cache: 1 (*out, and the
 * sequence's id in *seq_id), 0 when no sequence waits for one, < 0 on error (nothing handed out).
 * pm_engine_prefill fills it, beside the steps; pm_engine_resume gives it back. The sequence stays
 * live (and cancellable) meanwhile; its KV reservation stays with it. */
int pm_engine_take_recompute(pm_engine *eng, pm_encoded **out, int64_t *seq_id);
/* Gives a recompute back (enc is taken in every case). Complete: the sequence resumes from its new
 * cache and samples at its next step. error != NULL: the sequence ends with that error (on_error's class PM_ESTATE). Neither
 * (the caller stopped early): it waits to be taken again. A sequence that ended meanwhile is
 * ignored. */
int pm_engine_resume(pm_engine *eng, pm_encoded *enc, const char *error);
/* Live sequences a step advances: pm_engine_live less those parked for a recompute. */
int pm_engine_stepping(const pm_engine *eng);
/* The KV bytes it will reserve (pm_engine_kv_need); 0 for NULL. */
int64_t pm_encoded_kv_need(const pm_encoded *enc);
void pm_encoded_free(pm_encoded *enc);
/* One scheduler step: a prefill chunk or one decode token for every live sequence, batched.
 * Returns the number of live sequences afterwards, or a negative status. */
int pm_engine_step(pm_engine *eng);
/* Marks a sequence cancelled; it finishes (on_done CANCELLED) and frees its memory at the next step. */
int pm_engine_cancel(pm_engine *eng, int64_t seq_id);
int pm_engine_live(const pm_engine *eng);
void pm_engine_prefix_stats(const pm_engine *eng, pm_prefix_stats *st);
/* Tokens drafted (pm_engine_opts.draft_tokens) and taken so far. */
void pm_engine_draft_stats(const pm_engine *eng, int64_t *drafted, int64_t *accepted);
/* The KV bytes a request would reserve, computed without running any encoder; fails as
 * pm_engine_submit would on a malformed request or one larger than the budget (PM_ELIMIT). */
int pm_engine_kv_need(const pm_engine *eng, const pm_request *req, int64_t *bytes, char *err, size_t errlen);
/* The same, with the prompt's length in tokens after media expansion (prompt_tokens may be NULL).
 * Both read only what never changes after pm_engine_new: other threads may call them while one
 * steps. */
int pm_engine_plan_need(const pm_engine *eng, const pm_request *req, int64_t *bytes, int *prompt_tokens, char *err, size_t errlen);
/* The prompt as the decoder would take it, planned as above (no encoder runs, no KV budget): the
 * token ids after the chat prompt's tokenization and each media placeholder's expansion (a media
 * position holds its placeholder's id), *ids malloc'd. max_tokens may be 0 here; the context limit
 * counts it. */
int pm_engine_prompt_ids(const pm_engine *eng, const pm_request *req, int32_t **ids, size_t *n, char *err, size_t errlen);
/* The engine's KV budget (< 0: none) and what its live sequences reserve now, in bytes. */
void pm_engine_kv_usage(const pm_engine *eng, int64_t *reserved, int64_t *budget);
/* One request to completion on a private engine (opts NULL = defaults). */
int pm_generate(pm_model *m, const pm_request *req, const pm_engine_opts *opts, const pm_callbacks *cb, char *err, size_t errlen);

/* Renders a single-turn chat prompt with the checkpoint's template: <|system|>..<|end|><|user|>..<|end|><|assistant|>. */
char *pm_chat_prompt(const char *system, const char *user);

#ifdef __cplusplus
}
#endif
#endif
