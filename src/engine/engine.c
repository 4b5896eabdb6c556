/* engine.c — live sequences and the continuous-batching step.
 *
 * A sequence knows its tokens (expanded prompt, then generated ones) and how many of them its KV
 * cache holds. Each step gives every live sequence one chunk: up to prefill_chunk uncached rows
 * (prompt prefill, or the recompute below), or its one new token; all chunks run in one batched
 * forward, each with the sequence's own adapter. LongRoPE follows the official generate: a
 * sequence whose length first exceeds original_max_position switches to the long factors and
 * recomputes its whole cache (prompt rows keep their media embeddings), independent of the
 * other sequences in the batch: in the step's own chunks (every other sequence waits for each), or,
 * with opts.recompute_beside, parked while the caller runs it beside the steps (a 4,097-row
 * recompute of Phi-4-mini is ~8 chunks of ~10 s each on 2 cores: a stall of every stream).
 *
 * What a sampled token does (masks, stops, its text) is take.c's; the drafts a step checks, draft.c's.
 *
 * Memory: at admission a sequence reserves its worst case against the engine's budget: the KV
 * pages of its prompt + max_tokens and the rows it keeps beside them, sized from the plan before
 * any encoder runs (kv_budget.h). The pages themselves are still allocated as it grows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/kv_budget.h"
#include "engine/seq.h" /* pm_seq and struct pm_engine */
#include "nn/ops.h"

void pm_engine_opts_default(pm_engine_opts *o) {
    o->max_seqs = 16;
    o->prefill_chunk = 512;
    o->recompute_beside = 0;
    pm_limits_default(&o->limits);
    o->kv_budget = 0;
    o->kv_bf16 = 0;
    o->prefix_cache = 0;
    o->draft_tokens = 0;
}

static void set_err(char *err, size_t errlen, const pm_err *e) {
    if (err && errlen) snprintf(err, errlen, "%s", e->msg);
}

int pm_engine_new(pm_engine **out, pm_model *m, const pm_engine_opts *opts, char *err, size_t errlen) {
    pm_err e = {0};
    pm_engine *eng = pm_calloc(1, sizeof *eng, &e);
    if (!eng) {
        set_err(err, errlen, &e);
        return e.code;
    }
    eng->m = m;
    if (opts) eng->o = *opts;
    else pm_engine_opts_default(&eng->o);
    if (eng->o.max_seqs <= 0) eng->o.max_seqs = 16;
    if (eng->o.prefill_chunk <= 0) eng->o.prefill_chunk = 512;
    if (eng->o.draft_tokens < 0) eng->o.draft_tokens = 0;
    if (eng->o.draft_tokens > PM_MAX_DRAFT) eng->o.draft_tokens = PM_MAX_DRAFT;
    eng->seqs = pm_calloc((size_t)eng->o.max_seqs, sizeof *eng->seqs, &e);
    if (!eng->seqs) {
        free(eng);
        set_err(err, errlen, &e);
        return e.code;
    }
    eng->next_id = 1;
    eng->end_id = pm_model_token_id(m, "<|end|>");
    if (eng->o.draft_tokens &&
        !(eng->draft_logits = malloc(sizeof(float) * (size_t)(eng->o.draft_tokens + 1) * (size_t)m->llm.c.vocab))) {
        free(eng->seqs);
        free(eng);
        pm_errf(&e, PM_ENOMEM, "out of memory for the drafted rows' logits");
        set_err(err, errlen, &e);
        return e.code;
    }
    if (eng->draft_logits) eng->draft_rows = eng->o.draft_tokens + 1;
    eng->kv_budget = eng->o.kv_budget < 0 ? -1 : eng->o.kv_budget > 0 ? eng->o.kv_budget : pm_kv_budget_auto(m);
    int64_t cap = eng->o.prefix_cache > 0 ? eng->o.prefix_cache : eng->o.prefix_cache < 0 && eng->o.kv_budget == 0 ? eng->kv_budget / 4 : 0;
    if (cap > 0) {
        /* an eighth of it for encoder outputs: a 1344x896 image's 1,841 rows are 22.6 MB (with its
         * pixels, 3.6 MB) at Phi-4-mini's width, its K/V 460 MB */
        eng->media = pm_media_cache_new(cap / 8);
        if (!(eng->prefix = pm_prefix_cache_new(cap - cap / 8)) || !eng->media) {
            pm_media_cache_free(eng->media);
            pm_prefix_cache_free(eng->prefix);
            free(eng->draft_logits);
            free(eng->seqs);
            free(eng);
            pm_errf(&e, PM_ENOMEM, "out of memory for the prompt cache");
            set_err(err, errlen, &e);
            return e.code;
        }
        if (eng->o.prefix_cache < 0) eng->kv_budget -= cap; /* a quarter of the automatic budget */
    }
    *out = eng;
    return PM_OK;
}

static void seq_free(pm_seq *s) {
    if (!s) return;
    pm_prepared_free(&s->prep);
    free(s->tokens);
    pm_kv_free(&s->kv);
    pm_sampler_free(&s->sampler);
    pm_tok_stream_free(s->stream);
    for (int i = 0; i < s->n_stop; i++) free(s->stop[i]);
    free(s->stop);
    free(s->stop_ids);
    pm_restrict_free(&s->bans);
    free(s->hold);
    free(s->logits);
    free(s->lp_logits);
    pm_prompt_lp_free(&s->plp);
    pm_json_schema_free(s->schema);
    pm_regex_free(s->regex);
    pm_regex_masks_free(s->rx_masks);
    pm_grammar_state_free(s->gstate);
    pm_grammar_free(s->grammar);
    free(s->pred);
    free(s);
}

/* Where the prefill chunk of ids[0, n) that starts at p0 ends. A chunk holds prefill_chunk rows,
 * but ends early right after a message's <|end|> once it holds an eighth of that. Why: a chunk's
 * numbers depend on all its rows (the GEMM sums them together), so a reuse from the prompt cache
 * can end only where a chunk ended, and what the next prompt shares with an earlier one ends at a
 * message: a conversation's next turn begins with the previous prompt up to its last <|end|>,
 * requests with the same system message share it up to its <|end|>. The rule reads only ids
 * before the end it returns, so prompts that begin the same way get the same chunks there.
 * *forced (may be NULL): 1 when the chunk ends only because the prompt does (a longer prompt
 * would have gone on). */
static int chunk_end(const pm_engine *eng, const int32_t *ids, int n, int p0, int *forced) {
    int chunk = eng->o.prefill_chunk, min = chunk / 8 > 0 ? chunk / 8 : 1, cap = p0 + chunk;
    int end = cap < n ? cap : n;
    for (int s = p0 + min; s <= end && eng->end_id >= 0; s++)
        if (ids[s - 1] == eng->end_id) {
            if (forced) *forced = 0;
            return s;
        }
    if (forced) *forced = end < cap;
    return end;
}

/* The chunk boundaries of ids[0, n) up to limit, in order (*bounds malloc'd; 0 is not one): the
 * places a reuse from the prompt cache may end. With natural, only those a longer prompt that
 * begins the same way shares (not the prompt's end, unless a chunk ends there anyway). */
static int chunk_bounds(const pm_engine *eng, const int32_t *ids, int n, int limit, int natural, int **bounds, pm_err *e) {
    int k = 0, cap = 16, forced = 0;
    int *b = pm_malloc(sizeof(int) * (size_t)cap, e);
    if (!b) return -1;
    for (int p = 0; p < n;) {
        int q = chunk_end(eng, ids, n, p, &forced);
        if (q > limit || (natural && forced)) break;
        if (k == cap) {
            int *grown = realloc(b, sizeof(int) * (size_t)(cap *= 2));
            if (!grown) {
                free(b);
                return pm_errf(e, PM_ENOMEM, "out of memory for a prompt's chunk boundaries"), -1;
            }
            b = grown;
        }
        b[k++] = p = q;
    }
    *bounds = b;
    return k;
}

/* A prompt's whole prefill chunks in kv go to the prompt cache (up to its last chunk boundary
 * that a longer prompt shares): copied when its prefill has just completed (the sequence goes
 * on), moved when its sequence ends (kept unless a copy holds them). */
static void offer_prompt(const pm_engine *eng, const pm_prepared *prep, int n_prompt, pm_kv_cache *kv, int rope_long, int copy) {
    if (!eng->prefix) return;
    pm_err e = {0};
    int *bounds = NULL, nb = chunk_bounds(eng, prep->ids, n_prompt, kv->len < n_prompt ? kv->len : n_prompt, 1, &bounds, &e);
    int len = nb > 0 ? bounds[nb - 1] : 0;
    free(bounds);
    if (len <= 0) return;
    uint64_t *keys = NULL;
    if (pm_prefix_keys(prep, len, eng->m->llm.c.hidden, &keys, &e)) return;
    if (!pm_prefix_cache_put(eng->prefix, keys, prep->embeds, eng->m->llm.c.hidden, len, prep->adapter, rope_long, prep->salt, kv,
                             copy ? &eng->m->llm.c : NULL))
        free(keys);
}

static void offer_prefix(pm_engine *eng, pm_seq *s) {
    if (!s->parked) offer_prompt(eng, &s->prep, s->n_prompt, &s->kv, s->rope_long, 0);
}

/* A prompt's start from the prompt cache into kv (empty): the positions it starts past (0: none). */
static int reuse_prefix(const pm_engine *eng, const pm_prepared *prep, const pm_prompt_lp *plp, int rope_long, pm_kv_cache *kv,
                        pm_err *e) {
    int limit = pm_prompt_lp_rows_skippable(plp, (int)prep->n); /* a scored position's rows are computed */
    if (!eng->prefix || limit < 1 || kv->len) return 0;
    uint64_t *keys = NULL;
    int *bounds = NULL, nb = chunk_bounds(eng, prep->ids, prep->n, limit, 0, &bounds, e);
    if (nb < 0) return e->code;
    if (pm_prefix_keys(prep, prep->n, eng->m->llm.c.hidden, &keys, e)) {
        free(bounds);
        return e->code;
    }
    int got = pm_prefix_cache_take(eng->prefix, keys, prep->embeds, prep->n, bounds, nb, prep->adapter, rope_long, prep->salt,
                                   &eng->m->llm.c, kv, e);
    free(keys);
    free(bounds);
    return got;
}

void pm_engine_prefix_stats(const pm_engine *eng, pm_prefix_stats *st) {
    memset(st, 0, sizeof *st);
    if (eng && eng->prefix) pm_prefix_cache_stats(eng->prefix, st);
    if (eng && eng->media) pm_media_cache_stats(eng->media, &st->media_lookups, &st->media_hits, &st->media_bytes);
}

static void seq_end(pm_engine *eng, int i, pm_finish why, int code, const char *error) {
    pm_seq *s = eng->seqs[i];
    eng->kv_reserved -= s->kv_reserved;
    if (why != PM_FINISH_ERROR) offer_prefix(eng, s);
    if (s->cb.on_prompt_cached) s->cb.on_prompt_cached(s->cb.user, s->cached);
    if (s->pred && s->cb.on_prediction) s->cb.on_prediction(s->cb.user, s->pred_drafted, s->pred_accepted);
    if (why == PM_FINISH_ERROR && s->cb.on_error) s->cb.on_error(s->cb.user, code ? code : PM_ESTATE);
    if (s->cb.on_done) s->cb.on_done(s->cb.user, why, s->n_prompt, s->n_gen, error);
    seq_free(s);
    eng->seqs[i] = eng->seqs[--eng->n];
    eng->seqs[eng->n] = NULL;
}

void pm_seq_finish(pm_engine *eng, int i, pm_finish why) { seq_end(eng, i, why, 0, NULL); }

void pm_seq_fail(pm_engine *eng, int i, int code, const char *error) { seq_end(eng, i, PM_FINISH_ERROR, code, error); }

void pm_engine_free(pm_engine *eng) {
    if (!eng) return;
    pm_prefix_cache *prefix = eng->prefix;
    eng->prefix = NULL; /* the sequences ended here keep nothing */
    while (eng->n) pm_seq_finish(eng, eng->n - 1, PM_FINISH_CANCELLED);
    pm_prefix_cache_free(prefix);
    pm_media_cache_free(eng->media);
    pm_json_vocab_free(eng->json_vocab);
    pm_regex_vocab_free(eng->regex_vocab);
    pm_grammar_vocab_free(eng->grammar_vocab);
    free(eng->json_allow);
    free(eng->draft_logits);
    free(eng->seqs);
    free(eng);
}

void pm_engine_draft_stats(const pm_engine *eng, int64_t *drafted, int64_t *accepted) {
    if (drafted) *drafted = eng ? eng->drafted : 0;
    if (accepted) *accepted = eng ? eng->accepted : 0;
}


int pm_engine_live(const pm_engine *eng) { return eng->n; }

/* The checks every request passes before it is planned (its answer format's text is compiled
 * after them: compile_guide). */
static int check_request(const pm_request *req, int vocab, pm_err *e) {
    if (req->max_tokens < 0 || (req->max_tokens == 0 && !req->prompt_logprobs))
        return pm_errf(e, PM_EINVAL, "max_tokens must be positive (got %d; 0 only when the prompt is scored)", req->max_tokens);
    const pm_sampling *sp = &req->sampling;
    if (sp->temperature < 0 || sp->temperature != sp->temperature || sp->top_p < 0 || sp->top_p != sp->top_p || !(sp->min_p >= 0) ||
        sp->min_p > 1)
        return pm_errf(e, PM_EINVAL, "invalid sampling parameters (temperature %g, top_p %g, min_p %g)", sp->temperature, sp->top_p,
                       sp->min_p);
    if (req->top_logprobs < 0 || req->top_logprobs > PM_MAX_TOP_LOGPROBS)
        return pm_errf(e, PM_EINVAL, "top_logprobs must be 0..%d (got %d)", PM_MAX_TOP_LOGPROBS, req->top_logprobs);
    if (!isfinite(sp->frequency_penalty) || !isfinite(sp->presence_penalty) || !isfinite(sp->repetition_penalty) ||
        sp->repetition_penalty < 0)
        return pm_errf(e, PM_EINVAL, "invalid penalties (frequency %g, presence %g, repetition %g: finite, repetition >= 0)",
                       sp->frequency_penalty, sp->presence_penalty, sp->repetition_penalty);
    if (req->min_tokens < 0) return pm_errf(e, PM_EINVAL, "min_tokens must be >= 0 (got %d)", req->min_tokens);
    if (req->prompt_logprobs_from < 0)
        return pm_errf(e, PM_EINVAL, "prompt_logprobs_from must be >= 0 (got %d)", req->prompt_logprobs_from);
    if (req->format < PM_FORMAT_TEXT || req->format > PM_FORMAT_GRAMMAR)
        return pm_errf(e, PM_EINVAL, "unknown response format %d", (int)req->format);
    if (req->format == PM_FORMAT_REGEX && (!req->regex || strlen(req->regex) > PM_REGEX_MAX_PATTERN))
        return pm_errf(e, PM_EINVAL, "a guided pattern of at most %d bytes is needed", PM_REGEX_MAX_PATTERN);
    if (req->format == PM_FORMAT_GRAMMAR && !req->grammar) return pm_errf(e, PM_EINVAL, "a grammar is needed");
    if (req->format == PM_FORMAT_CHOICE) {
        if (req->n_choices < 1 || req->n_choices > PM_MAX_CHOICES || !req->choices)
            return pm_errf(e, PM_EINVAL, "guided choices hold 1..%d strings (got %d)", PM_MAX_CHOICES, req->n_choices);
        size_t bytes = 0;
        for (int i = 0; i < req->n_choices; i++) {
            if (!req->choices[i]) return pm_errf(e, PM_EINVAL, "guided choice %d is missing", i);
            bytes += strlen(req->choices[i]);
        }
        if (bytes > PM_REGEX_MAX_PATTERN / 2)
            return pm_errf(e, PM_EINVAL, "the guided choices hold %zu bytes, more than %d", bytes, PM_REGEX_MAX_PATTERN / 2);
    }
    if (req->json_lazy && (req->format == PM_FORMAT_TEXT || req->format >= PM_FORMAT_REGEX || req->json_open < 0 || req->json_open >= vocab || req->json_close < 0 ||
                           req->json_close >= vocab || req->json_open == req->json_close))
        return pm_errf(e, PM_EINVAL, "lazy JSON mode needs a JSON format and two different tokens in [0, %d) (got %d, %d)", vocab,
                       (int)req->json_open, (int)req->json_close);
    if (req->cache_salt && strlen(req->cache_salt) > PM_MAX_CACHE_SALT)
        return pm_errf(e, PM_EINVAL, "cache_salt holds at most %d bytes (got %zu)", PM_MAX_CACHE_SALT, strlen(req->cache_salt));
    if (req->prediction && strlen(req->prediction) > PM_MAX_PREDICTION)
        return pm_errf(e, PM_EINVAL, "the prediction holds at most %d bytes (got %zu)", PM_MAX_PREDICTION, strlen(req->prediction));
    if (req->n_stop_ids < 0 || req->n_stop_ids > PM_MAX_STOP_IDS || (req->n_stop_ids > 0 && !req->stop_ids))
        return pm_errf(e, PM_EINVAL, "stop token ids hold 0..%d entries (got %d)", PM_MAX_STOP_IDS, req->n_stop_ids);
    for (int i = 0; i < req->n_stop_ids; i++)
        if (req->stop_ids[i] < 0 || req->stop_ids[i] >= vocab)
            return pm_errf(e, PM_EINVAL, "stop token id %d (entry %d) is not in [0, %d)", (int)req->stop_ids[i], i, vocab);
    if (pm_restrict_check(req, vocab, e)) return e->code;
    if (req->n_logit_bias < 0 || req->n_logit_bias > PM_MAX_LOGIT_BIAS || (req->n_logit_bias > 0 && !req->logit_bias))
        return pm_errf(e, PM_EINVAL, "logit_bias holds 0..%d entries (got %d)", PM_MAX_LOGIT_BIAS, req->n_logit_bias);
    for (int i = 0; i < req->n_logit_bias; i++)
        if (req->logit_bias[i].token < 0 || req->logit_bias[i].token >= vocab || !isfinite(req->logit_bias[i].bias))
            return pm_errf(e, PM_EINVAL, "logit_bias[%d]: token %d must be in [0, %d) and its bias finite (got %g)", i,
                           (int)req->logit_bias[i].token, vocab, req->logit_bias[i].bias);
    return PM_OK;
}

/* A request's answer format compiled: the DFA of a guided pattern or choice list, a JSON schema's
 * graph or a grammar (at most one set). Compiled once, where the request is planned (the encoding
 * thread); the encoded request takes it, and admission, on the stepping thread, only takes it from
 * there. */
typedef struct req_guide {
    pm_regex *regex;
    pm_json_schema *schema;
    pm_grammar *grammar;
} req_guide;

static void guide_free(req_guide *g) {
    pm_regex_free(g->regex);
    pm_json_schema_free(g->schema);
    pm_grammar_free(g->grammar);
    memset(g, 0, sizeof *g);
}

/* What the request's answer format holds for its whole life beside the KV cache: its automata,
 * a pattern's kept masks, and for a grammar the most its parse state may come to. */
static int64_t guide_bytes(const req_guide *g, int vocab) {
    return (int64_t)(g->regex ? pm_regex_bytes(g->regex) + pm_regex_masks_bytes(vocab) : 0) +
           (int64_t)(g->schema ? pm_json_schema_bytes(g->schema) : 0) +
           (g->grammar ? (int64_t)pm_grammar_bytes(g->grammar) + PM_GRAMMAR_STATE_BYTES : 0);
}

static int compile_guide(const pm_request *req, req_guide *g, pm_err *e) {
    memset(g, 0, sizeof *g);
    if (req->format == PM_FORMAT_REGEX || req->format == PM_FORMAT_CHOICE) {
        char *choices = req->format == PM_FORMAT_CHOICE ? pm_regex_of_choices(req->choices, req->n_choices, e) : NULL;
        if (req->format == PM_FORMAT_CHOICE && !choices) return e->code;
        const char *p = choices ? choices : req->regex;
        if (pm_regex_compile(p, strlen(p), &g->regex, e)) pm_err_ctx(e, "%s: ", choices ? "guided choices" : "guided pattern");
        free(choices);
    } else if (req->format == PM_FORMAT_JSON_SCHEMA) {
        pm_json_schema_compile(req->json_schema, &g->schema, e);
    } else if (req->format == PM_FORMAT_GRAMMAR) {
        pm_grammar_compile(req->grammar, strlen(req->grammar), &g->grammar, e);
    }
    if (e->code == PM_EUNSUPPORTED) e->code = PM_EINVAL; /* a request refused, as the others here */
    if (e->code) guide_free(g);
    return e->code;
}

/* Plans the request and sizes its reservation: the KV pages of the expanded prompt plus max_tokens
 * positions, and what the sequence holds beside them for its whole life (the prompt's merged
 * embedding rows, kept for a LongRoPE recompute, and its logits: 12 KiB per prompt token and
 * 0.8 MB on Phi-4-mini against 256 KiB per position of cache; its answer format's automata, a
 * pattern's kept masks (0.4 MB) and a grammar's parse state, up to ~31 MB: guide_bytes). */
static int plan_request(const pm_engine *eng, const pm_request *req, pm_plan *plan, int64_t *need, req_guide *g, pm_err *e) {
    req_guide checked; /* compiled only to refuse a bad one where the caller keeps none */
    if (!g) g = &checked;
    if (check_request(req, eng->m->llm.c.vocab, e) || compile_guide(req, g, e)) return e->code;
    int64_t guide = guide_bytes(g, eng->m->llm.c.vocab);
    if (g == &checked) guide_free(g);
    if (pm_prepare_plan(eng->m, req, &eng->o.limits, plan, e)) {
        guide_free(g);
        return e->code;
    }
    const pm_llm_config *c = &eng->m->llm.c;
    int positions = (int)plan->n + req->max_tokens; /* <= max_context: the plan checked it */
    *need = (int64_t)pm_kv_bytes(c, positions, eng->o.kv_bf16) + (int64_t)sizeof(float) * ((int64_t)plan->n * c->hidden + c->vocab) + guide;
    if (req->prompt_logprobs) *need += pm_prompt_lp_bytes((int)plan->n, req->top_logprobs);
    if (eng->kv_budget >= 0 && *need > eng->kv_budget) {
        pm_errf(e, PM_ELIMIT,
                "prompt of %zu tokens plus max_tokens %d needs %.1f MiB of KV cache and prompt rows%s, over the engine's KV "
                "budget of %.1f MiB (lower max_tokens, shorten the prompt, or raise the budget: --kv-budget)",
                plan->n, req->max_tokens, (double)*need / 1048576.0, guide ? " (and its answer format's automata)" : "",
                (double)eng->kv_budget / 1048576.0);
        pm_plan_free(plan);
        guide_free(g);
    }
    return e->code;
}

int pm_engine_plan_need(const pm_engine *eng, const pm_request *req, int64_t *bytes, int *prompt_tokens, char *err, size_t errlen) {
    pm_err e = {0};
    pm_plan plan;
    *bytes = 0;
    if (prompt_tokens) *prompt_tokens = 0;
    if (!plan_request(eng, req, &plan, bytes, NULL, &e)) {
        if (prompt_tokens) *prompt_tokens = (int)plan.n;
        pm_plan_free(&plan);
    }
    set_err(err, errlen, &e);
    return e.code;
}

int pm_engine_prompt_ids(const pm_engine *eng, const pm_request *req, int32_t **ids, size_t *n, char *err, size_t errlen) {
    pm_err e = {0};
    pm_plan plan;
    pm_request r = *req;
    if (r.max_tokens == 0) r.prompt_logprobs = 1; /* nothing to generate: a prompt alone, as a scored one */
    *ids = NULL;
    *n = 0;
    if (!check_request(&r, eng->m->llm.c.vocab, &e) && !pm_prepare_plan(eng->m, &r, &eng->o.limits, &plan, &e)) {
        *ids = plan.ids;
        *n = plan.n;
        plan.ids = NULL;
        pm_plan_free(&plan);
    }
    set_err(err, errlen, &e);
    return e.code;
}

int pm_engine_kv_need(const pm_engine *eng, const pm_request *req, int64_t *bytes, char *err, size_t errlen) {
    return pm_engine_plan_need(eng, req, bytes, NULL, err, errlen);
}

void pm_engine_kv_usage(const pm_engine *eng, int64_t *reserved, int64_t *budget) {
    if (reserved) *reserved = eng->kv_reserved;
    if (budget) *budget = eng->kv_budget;
}

/* A request planned and through its encoders (pm_engine_encode), perhaps prefilled
 * (pm_engine_prefill): what a sequence starts from. */
struct pm_encoded {
    pm_prepared prep; /* prep.n rows to prefill: the first n_embeds from prep.embeds, the rest embeds of prep.ids */
    int n_embeds;
    int64_t seq_id; /* a recompute's sequence (pm_engine_take_recompute); 0 for a request */
    int64_t need;   /* its reservation (plan_request) */
    int max_tokens; /* what the reservation was sized for */
    pm_kv_cache kv; /* the prompt's positions prefilled so far */
    int rope_long;
    int cached;    /* the prompt positions the prompt cache held */
    float *logits;  /* [vocab] after the last prompt position, once kv.len == prep.n */
    pm_prompt_lp plp; /* prompt_logprobs: scored as the chunks run */
    int32_t *pred;    /* pm_request.prediction's tokens (NULL: none): made here, on the encoding thread */
    int n_pred;
    pm_regex *regex;  /* a guided request's DFA, compiled where it was planned (the encoding thread) */
    pm_json_schema *schema; /* its JSON schema's graph and its grammar, compiled there too: admission, */
    pm_grammar *grammar;    /* on the stepping thread, only takes them */
};

void pm_encoded_free(pm_encoded *enc) {
    if (!enc) return;
    pm_prepared_free(&enc->prep);
    pm_kv_free(&enc->kv);
    free(enc->logits);
    pm_prompt_lp_free(&enc->plp);
    free(enc->pred);
    pm_regex_free(enc->regex);
    pm_json_schema_free(enc->schema);
    pm_grammar_free(enc->grammar);
    free(enc);
}

/* The input rows of positions [p0, p0 + n): the prompt's merged embeddings below n_embeds, the
 * embeddings of ids past it. */
static int chunk_rows(const pm_llm *llm, const pm_prepared *prep, int n_embeds, const int32_t *ids, int p0, int n, float *dst, pm_err *e) {
    int H = llm->c.hidden;
    for (int j = 0; j < n; j++) {
        int p = p0 + j;
        if (p < n_embeds) memcpy(dst + (size_t)j * H, prep->embeds + (size_t)p * H, sizeof(float) * H);
        else if (pm_llm_embed(llm, &ids[p], 1, dst + (size_t)j * H, e)) return e->code;
    }
    return PM_OK;
}

int pm_engine_prefill(const pm_engine *eng, pm_encoded *enc, int max_rows, char *err, size_t errlen) {
    pm_err e = {0};
    const pm_llm *llm = &eng->m->llm;
    int n_prompt = enc->prep.n;
    if (n_prompt <= 0) {
        pm_errf(&e, PM_EINVAL, "nothing to prefill: the prompt is empty");
        goto out;
    }
    if (!enc->logits && !(enc->logits = pm_malloc(sizeof(float) * (size_t)llm->c.vocab, &e))) goto out;
    /* what pm_engine_step decides at a sequence's first step; a request's prompt starts past what
     * the prompt cache holds of it (not the rows of a position to score) */
    if (enc->kv.len == 0) {
        enc->rope_long = n_prompt > llm->c.orig_max_pos;
        if (!enc->seq_id && (enc->cached = reuse_prefix(eng, &enc->prep, &enc->plp, enc->rope_long, &enc->kv, &e)) < 0)
            goto out;
    }
    /* the chunks pm_engine_step would run, one forward each: the same numbers */
    while (enc->kv.len < n_prompt && max_rows > 0) {
        int p0 = enc->kv.len, n = chunk_end(eng, enc->prep.ids, n_prompt, p0, NULL) - p0;
        float *rows = NULL; /* only for a chunk past the media rows (a recompute's generated tokens) */
        float *normed = NULL; /* the rows after the final norm, when the prompt is scored */
        pm_llm_trace tr = {NULL, NULL};
        if (p0 + n > enc->n_embeds &&
            (!(rows = pm_malloc(sizeof(float) * (size_t)n * llm->c.hidden, &e)) ||
             chunk_rows(llm, &enc->prep, enc->n_embeds, enc->prep.ids, p0, n, rows, &e)))
            goto chunk_out;
        if (pm_prompt_lp_pending(&enc->plp) && !(tr.final_norm = normed = pm_malloc(sizeof(float) * (size_t)n * llm->c.hidden, &e)))
            goto chunk_out;
        pm_llm_chunk c = {&enc->kv, rows ? rows : enc->prep.embeds + (size_t)p0 * llm->c.hidden, n, enc->prep.adapter, enc->rope_long,
                          p0 + n == n_prompt ? enc->logits : NULL, normed ? &tr : NULL, 0};
        if (!pm_llm_forward(llm, &c, 1, &e) && normed) pm_prompt_lp_score(&enc->plp, llm, normed, p0, n, enc->prep.ids, NULL, &e);
    chunk_out:
        free(rows);
        free(normed);
        if (e.code) goto out;
        max_rows -= n;
    }
    if (!enc->seq_id && enc->kv.len == n_prompt) offer_prompt(eng, &enc->prep, n_prompt, &enc->kv, enc->rope_long, 1);
out:
    set_err(err, errlen, &e);
    return e.code ? e.code : enc->kv.len == n_prompt;
}

int64_t pm_encoded_kv_need(const pm_encoded *enc) { return enc ? enc->need : 0; }

/* Refuses what the engine cannot take beside its live sequences now (PM_EBUSY). */
static int check_room(const pm_engine *eng, int64_t need, pm_err *e) {
    if (eng->n >= eng->o.max_seqs) return pm_errf(e, PM_EBUSY, "engine is full (%d live sequences)", eng->n);
    if (eng->kv_budget >= 0 && eng->kv_reserved + need > eng->kv_budget)
        return pm_errf(e, PM_EBUSY, "the KV budget is in use: %.1f of %.1f MiB reserved by %d live sequences, %.1f MiB needed",
                       (double)eng->kv_reserved / 1048576.0, (double)eng->kv_budget / 1048576.0, eng->n, (double)need / 1048576.0);
    return PM_OK;
}

/* Plans and runs the encoders; reads only what never changes after pm_engine_new (the model, the
 * limits, the budget, the test fault), so it may run beside pm_engine_step on another thread. */
static int encode_request(const pm_engine *eng, const pm_request *req, pm_plan *plan, int64_t need, req_guide *g, pm_encoded **out,
                          pm_err *e) {
    pm_encoded *enc = pm_calloc(1, sizeof *enc, e);
    if (!enc) return e->code;
    enc->kv.bf16 = eng->o.kv_bf16;
    e->stop = req->should_stop; /* asked between encoder blocks */
    e->stop_user = req->stop_user;
    pm_prep_trace ft = {0};
    ft.fault = eng->fault;
    enc->need = need;
    enc->max_tokens = req->max_tokens;
    if (pm_prepare_finish(eng->m, req, plan, &enc->prep, eng->fault ? &ft : NULL, eng->fault ? NULL : eng->media, e)) {
        free(enc);
        return e->code;
    }
    enc->n_embeds = enc->prep.n;
    enc->regex = g->regex; /* the encoded request owns the compiled format from here */
    enc->schema = g->schema;
    enc->grammar = g->grammar;
    memset(g, 0, sizeof *g);
    if (req->prompt_logprobs && pm_prompt_lp_init(&enc->plp, enc->prep.n, req->top_logprobs, req->prompt_logprobs_from, e)) {
        pm_encoded_free(enc);
        return e->code;
    }
    if (req->prediction && req->prediction[0]) { /* as text: its special tokens' names are plain text too */
        size_t np = 0;
        if (pm_tok_encode(eng->m->tok, req->prediction, strlen(req->prediction), 0, &enc->pred, &np, e)) {
            pm_encoded_free(enc);
            return e->code;
        }
        enc->n_pred = (int)np;
    }
    *out = enc;
    return PM_OK;
}

int pm_engine_encode(const pm_engine *eng, const pm_request *req, pm_encoded **out, char *err, size_t errlen) {
    pm_err e = {0};
    pm_plan plan = {0};
    int64_t need = 0;
    *out = NULL;
    req_guide g = {0};
    if (!plan_request(eng, req, &plan, &need, &g, &e)) {
        encode_request(eng, req, &plan, need, &g, out, &e);
        pm_plan_free(&plan);
    }
    guide_free(&g);
    set_err(err, errlen, &e);
    return e.code;
}

/* The encoded request becomes a live sequence; *enc is taken on success only. */
static int admit_encoded(pm_engine *eng, pm_encoded **encp, const pm_request *req, const pm_callbacks *cb, int64_t *seq_id, pm_err *e) {
    pm_encoded *enc = *encp;
    if (check_room(eng, enc->need, e)) return e->code;
    if (cb && cb->on_prompt_logits && pm_prompt_lp_started(&enc->plp))
        return pm_errf(e, PM_EINVAL, "on_prompt_logits: the prompt was scored before its submission (pm_engine_prefill), which keeps no logits: "
                                     "submit it with pm_engine_submit");
    const pm_sampling *sp = &req->sampling;
    pm_seq *s = pm_calloc(1, sizeof *s, e);
    if (!s) return e->code;
    s->kv.bf16 = eng->o.kv_bf16; /* the element type of the cache it prefills (or the encoder's, taken below) */
    s->n_prompt = enc->prep.n;
    s->logits_ready = enc->logits && s->n_prompt > 0 && enc->kv.len == s->n_prompt;
    s->max_tokens = req->max_tokens;
    s->max_context = eng->o.limits.max_context > 0 ? eng->o.limits.max_context : eng->m->llm.c.max_pos;
    s->cap_tokens = s->n_prompt + req->max_tokens + 1;
    s->tokens = pm_malloc(sizeof(int32_t) * (size_t)s->cap_tokens, e);
    s->logits = s->logits_ready ? NULL : pm_malloc(sizeof(float) * (size_t)eng->m->llm.c.vocab, e);
    if (e->code) goto fail;
    memcpy(s->tokens, enc->prep.ids, sizeof(int32_t) * (size_t)s->n_prompt);
    s->n_tokens = s->n_prompt;
    if (pm_sampler_init(&s->sampler, sp, req->logit_bias, req->n_logit_bias, eng->m->llm.c.vocab)) {
        pm_errf(e, PM_ENOMEM, "out of memory for the sampler");
        goto fail;
    }
    if (pm_sampler_prompt(&s->sampler, s->tokens, s->n_prompt)) {
        pm_errf(e, PM_ENOMEM, "out of memory for the penalties' table of the prompt's tokens");
        goto fail;
    }
    s->top_logprobs = (req->logprobs || req->top_logprobs > 0) && cb && cb->on_logprobs ? req->top_logprobs : -1;
    s->logprobs_eos = req->logprobs_eos;
    int json_format = req->format == PM_FORMAT_JSON_OBJECT || req->format == PM_FORMAT_JSON_SCHEMA;
    s->json = json_format && !req->json_lazy;
    s->json_open = req->json_lazy ? req->json_open : -1;
    s->json_close = req->json_lazy ? req->json_close : -1;
    s->schema = enc->schema; /* borrowed until admitted, as the DFA below */
    pm_json_init(&s->json_state, s->schema ? pm_json_schema_root(s->schema) : pm_json_any_object());
    if (json_format && !eng->json_vocab && !(eng->json_vocab = pm_json_vocab_new(eng->m->tok, eng->m->llm.c.vocab))) {
        pm_errf(e, PM_ENOMEM, "out of memory for JSON mode's vocabulary index");
        goto fail;
    }
    if (enc->regex) { /* the guided pattern's DFA: borrowed until the request is admitted (below) */
        if (!eng->regex_vocab && !(eng->regex_vocab = pm_regex_vocab_new(eng->m->tok, eng->m->llm.c.vocab))) {
            pm_errf(e, PM_ENOMEM, "out of memory for the guided patterns' vocabulary index");
            goto fail;
        }
        s->regex = enc->regex;
        s->rx_state = pm_regex_start(s->regex);
        if (!(s->rx_masks = pm_regex_masks_new(s->regex, eng->regex_vocab))) {
            pm_errf(e, PM_ENOMEM, "out of memory for the guided pattern's masks");
            goto fail;
        }
    }
    if (enc->grammar) { /* compiled with the request; its parse state the sequence's */
        if (!eng->grammar_vocab && !(eng->grammar_vocab = pm_grammar_vocab_new(eng->m->tok, eng->m->llm.c.vocab))) {
            pm_errf(e, PM_ENOMEM, "out of memory for the grammars' vocabulary trie");
            goto fail;
        }
        s->grammar = enc->grammar;
        if (!(s->gstate = pm_grammar_start(s->grammar, e))) goto fail;
    }
    if (req->format != PM_FORMAT_TEXT && !eng->json_allow && !(eng->json_allow = malloc((size_t)eng->m->llm.c.vocab))) {
        pm_errf(e, PM_ENOMEM, "out of memory for the mask's scratch");
        goto fail;
    }
    s->min_tokens = req->min_tokens;
    s->ignore_eos = req->ignore_eos;
    s->pred = enc->pred; /* the prediction's tokens, made when it was encoded */
    s->n_pred = enc->n_pred;
    enc->pred = NULL;
    if (s->top_logprobs >= 0 && (pm_sampler_modifies(&s->sampler) || req->format != PM_FORMAT_TEXT || s->min_tokens > 0 || s->ignore_eos ||
                                 req->n_allowed_ids > 0 || req->n_bad_words > 0) &&
        !(s->lp_logits = pm_malloc(sizeof(float) * (size_t)eng->m->llm.c.vocab, e)))
        goto fail;
    s->stream = pm_tok_stream_new(eng->m->tok, !req->keep_special);
    if (!s->stream) {
        pm_errf(e, PM_ENOMEM, "out of memory for the detokenizer");
        goto fail;
    }
    if (req->n_stop > 0) {
        s->stop = pm_calloc((size_t)req->n_stop, sizeof(char *), e);
        if (!s->stop) goto fail;
        for (int i = 0; i < req->n_stop; i++)
            if (req->stop[i] && req->stop[i][0] && !(s->stop[s->n_stop++] = strdup(req->stop[i]))) {
                pm_errf(e, PM_ENOMEM, "out of memory for the stop strings");
                goto fail;
            }
    }
    if (req->n_stop_ids > 0) {
        if (!(s->stop_ids = pm_malloc(sizeof(int32_t) * (size_t)req->n_stop_ids, e))) goto fail;
        memcpy(s->stop_ids, req->stop_ids, sizeof(int32_t) * (size_t)req->n_stop_ids);
        s->n_stop_ids = req->n_stop_ids;
    }
    s->stop_in_output = req->stop_in_output;
    if (pm_restrict_init(&s->bans, eng->m->tok, req, e)) goto fail;
    s->prep = enc->prep; /* the prompt rows move over, and its cache and logits when prefilled */
    if (cb && cb->on_prompt_logprobs) pm_prompt_lp_move(&s->plp, &enc->plp); /* and the prompt's scores, so far */
    pm_prompt_lp_free(&enc->plp);
    s->kv_reserved = enc->need;
    if (s->logits_ready) {
        s->kv = enc->kv;
        s->cached = enc->cached;
        s->rope_long = enc->rope_long;
        s->logits = enc->logits;
    } else {
        pm_kv_free(&enc->kv);
        free(enc->logits);
        /* prefilled by the steps: past what the prompt cache holds of it, with the RoPE factors
         * the first step would choose */
        int rope_long = s->n_prompt > eng->m->llm.c.orig_max_pos;
        if ((s->cached = reuse_prefix(eng, &s->prep, &s->plp, rope_long, &s->kv, e)) > 0) s->rope_long = rope_long;
        if (s->cached < 0) s->cached = 0; /* not taken: computed by the steps */
        pm_err_clear(e);
    }
    free(enc); /* what it held is the sequence's now, the guided DFA, schema and grammar too */
    *encp = NULL;
    if (cb) s->cb = *cb;
    s->id = eng->next_id++;
    eng->kv_reserved += s->kv_reserved;
    eng->seqs[eng->n++] = s;
    if (seq_id) *seq_id = s->id;
    return PM_OK;
fail:
    s->regex = NULL; /* still the encoded request's, which stays the caller's to retry or free */
    s->schema = NULL;
    s->grammar = NULL;
    seq_free(s);
    return e->code ? e->code : PM_ENOMEM;
}

int pm_engine_submit_encoded(pm_engine *eng, pm_encoded *enc, const pm_request *req, const pm_callbacks *cb, int64_t *seq_id, char *err,
                             size_t errlen) {
    pm_err e = {0};
    if (!enc) pm_errf(&e, PM_EINVAL, "no encoded request");
    else if (enc->seq_id) pm_errf(&e, PM_EINVAL, "a recompute goes back to its sequence (pm_engine_resume), not in as a request");
    else if (req->max_tokens != enc->max_tokens)
        pm_errf(&e, PM_EINVAL, "max_tokens %d differs from the %d the request was encoded with", req->max_tokens, enc->max_tokens);
    else if (!check_request(req, eng->m->llm.c.vocab, &e) && admit_encoded(eng, &enc, req, cb, seq_id, &e) == PM_OK) return PM_OK;
    set_err(err, errlen, &e);
    return e.code;
}

int pm_engine_submit(pm_engine *eng, const pm_request *req, const pm_callbacks *cb, int64_t *seq_id, char *err, size_t errlen) {
    pm_err e = {0};
    pm_plan plan = {0};
    pm_encoded *enc = NULL;
    int64_t need = 0;
    /* the room is checked before any encoder runs */
    req_guide g = {0};
    if (!check_room(eng, 0, &e) && !plan_request(eng, req, &plan, &need, &g, &e)) {
        if (!check_room(eng, need, &e) && !encode_request(eng, req, &plan, need, &g, &enc, &e)) admit_encoded(eng, &enc, req, cb, seq_id, &e);
        pm_plan_free(&plan);
    }
    guide_free(&g);
    pm_encoded_free(enc);
    set_err(err, errlen, &e);
    return e.code;
}

int pm_engine_cancel(pm_engine *eng, int64_t seq_id) {
    for (int i = 0; i < eng->n; i++)
        if (eng->seqs[i]->id == seq_id) {
            eng->seqs[i]->cancelled = 1;
            return PM_OK;
        }
    return PM_EINVAL;
}

int pm_engine_stepping(const pm_engine *eng) {
    int n = 0;
    for (int i = 0; i < eng->n; i++) n += !eng->seqs[i]->parked;
    return n;
}

int pm_engine_take_recompute(pm_engine *eng, pm_encoded **out, int64_t *seq_id) {
    pm_err e = {0};
    *out = NULL;
    for (int i = 0; i < eng->n; i++) {
        pm_seq *s = eng->seqs[i];
        if (s->parked != PARK_WAITING || s->cancelled) continue;
        pm_encoded *enc = pm_calloc(1, sizeof *enc, &e);
        int32_t *ids = pm_malloc(sizeof(int32_t) * (size_t)s->n_tokens, &e);
        if (e.code) {
            free(enc);
            free(ids);
            return e.code;
        }
        enc->kv.bf16 = eng->o.kv_bf16;
        /* every token so far; the prompt's media rows move over (the sequence reads them only for
         * this recompute) */
        memcpy(ids, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
        enc->prep = s->prep;
        enc->prep.ids = ids;
        enc->prep.n = s->n_tokens;
        enc->n_embeds = s->n_prompt;
        enc->seq_id = s->id;
        enc->max_tokens = s->max_tokens;
        pm_prompt_lp_move(&enc->plp, &s->plp); /* a prompt past the switch is scored in its first (long) prefill: this one */
        s->prep.embeds = NULL;
        s->parked = PARK_AWAY;
        *out = enc;
        if (seq_id) *seq_id = s->id;
        return 1;
    }
    return 0;
}

int pm_engine_resume(pm_engine *eng, pm_encoded *enc, const char *error) {
    if (!enc) return PM_EINVAL;
    if (!enc->seq_id) { /* a request's: pm_engine_submit_encoded */
        pm_encoded_free(enc);
        return PM_EINVAL;
    }
    int i = 0;
    while (i < eng->n && !(eng->seqs[i]->id == enc->seq_id && eng->seqs[i]->parked == PARK_AWAY)) i++;
    if (i < eng->n) {
        pm_seq *s = eng->seqs[i];
        if (error) {
            pm_seq_fail(eng, i, PM_ESTATE, error);
        } else if (enc->logits && enc->kv.len == enc->prep.n && enc->prep.n == s->n_tokens) {
            pm_kv_free(&s->kv);
            s->kv = enc->kv;
            memset(&enc->kv, 0, sizeof enc->kv);
            free(s->logits);
            s->logits = enc->logits;
            enc->logits = NULL;
            s->logits_ready = 1;
            pm_prompt_lp_move(&s->plp, &enc->plp);
            s->parked = PARK_NONE; /* its media rows are not needed again: they go with enc */
        } else { /* stopped early: wait to be taken again, from scratch */
            s->prep.embeds = enc->prep.embeds;
            enc->prep.embeds = NULL;
            pm_prompt_lp_move(&s->plp, &enc->plp); /* the positions scored so far stay scored */
            s->parked = PARK_WAITING;
        }
    }
    pm_encoded_free(enc);
    return PM_OK;
}


int pm_engine_step(pm_engine *eng) {
    pm_err e = {0};
    const pm_llm *llm = &eng->m->llm;
    int H = llm->c.hidden;
    for (int i = eng->n - 1; i >= 0; i--)
        if (eng->seqs[i]->cancelled) pm_seq_finish(eng, i, PM_FINISH_CANCELLED);
    if (!eng->n) return 0;
    int nc = eng->n;
    pm_llm_chunk *ch = pm_calloc((size_t)eng->n, sizeof *ch, &e);
    float **rows = pm_calloc((size_t)eng->n, sizeof *rows, &e);
    pm_llm_trace *tr = pm_calloc((size_t)eng->n, sizeof *tr, &e); /* final_norm: a scored prompt chunk's rows */
    if (e.code) goto fail;
    for (int i = 0; i < eng->n; i++) {
        pm_seq *s = eng->seqs[i];
        if (!s->rope_long && s->n_tokens > llm->c.orig_max_pos) {
            s->rope_long = 1;   /* first time past the switch: recompute everything with long factors */
            s->kv.len = 0;
            /* beside the steps: its cache goes now, a new one comes back (not a prompt whose
             * logits its caller takes: only the steps hand them out) */
            if (eng->o.recompute_beside && !(s->cb.on_prompt_logits && pm_prompt_lp_pending(&s->plp))) {
                pm_kv_free(&s->kv);
                s->kv.bf16 = eng->o.kv_bf16;
                s->parked = PARK_WAITING;
            }
        }
        if (s->parked) continue; /* no chunk: n = 0 */
        if (s->logits_ready) { /* prefilled before admission: its first token comes from those logits */
            s->logits_ready = 0;
            ch[i].logits = s->logits;
            continue;
        }
        int p0 = s->kv.len, n = chunk_end(eng, s->tokens, s->n_tokens, p0, NULL) - p0;
        pm_seq_draft(eng, s); /* the next token's row, then the drafted ones' */
        rows[i] = pm_malloc(sizeof(float) * (size_t)(n + s->n_draft) * H, &e);
        if (!rows[i] || chunk_rows(llm, &s->prep, s->n_prompt, s->tokens, p0, n, rows[i], &e) ||
            (s->n_draft && pm_llm_embed(llm, s->draft, s->n_draft, rows[i] + (size_t)n * H, &e)))
            goto fail;
        pm_adapter ad = eng->fault == PM_FAULT_LEAK_ADAPTER ? eng->seqs[0]->prep.adapter : s->prep.adapter;
        if (pm_prompt_lp_pending(&s->plp) && !(tr[i].final_norm = pm_malloc(sizeof(float) * (size_t)n * H, &e))) goto fail;
        pm_llm_chunk c = {&s->kv, rows[i], n + s->n_draft, ad, s->rope_long, p0 + n == s->n_tokens ? s->logits : NULL,
                          tr[i].final_norm ? &tr[i] : NULL, 0};
        if (s->n_draft) {
            c.logits = eng->draft_logits;
            c.n_logits = 1 + s->n_draft;
        }
        ch[i] = c;
    }
    /* Prefill chunks run one forward each, so a prompt's numbers never depend on what else is in
     * flight; all single-token decode rows share one batched forward (row-independent kernels). */
    {
        pm_llm_chunk *dec = pm_calloc((size_t)nc, sizeof *dec, &e);
        int nd = 0;
        if (!dec) goto fail;
        for (int i = 0; i < nc; i++) {
            if (ch[i].n == 1) dec[nd++] = ch[i];
            else if (ch[i].n > 1 && pm_llm_forward(llm, &ch[i], 1, &e)) break;
        }
        if (!e.code && nd) pm_llm_forward(llm, dec, nd, &e);
        free(dec);
        if (e.code) goto fail;
    }
    for (int i = 0; i < nc; i++) /* the forward moved kv.len past the chunk */
        if (tr[i].final_norm &&
            pm_prompt_lp_score(&eng->seqs[i]->plp, llm, tr[i].final_norm, eng->seqs[i]->kv.len - ch[i].n, ch[i].n, eng->seqs[i]->tokens,
                               &eng->seqs[i]->cb, &e))
            goto fail;
    for (int i = eng->n - 1; i >= 0; i--) {
        pm_seq *s = eng->seqs[i];
        if (!ch[i].logits) continue;
        if (s->plp.chosen) { /* the prompt is in: its scores go first, once */
            pm_prompt_lp_report(&s->plp, s->tokens, &s->cb);
            pm_prompt_lp_free(&s->plp);
        }
        if (ch[i].n > 0 && s->n_gen == 0) offer_prompt(eng, &s->prep, s->n_prompt, &s->kv, s->rope_long, 1); /* its prompt is in */
        if (s->max_tokens == 0) { /* a scoring request: nothing to generate */
            pm_seq_finish(eng, i, PM_FINISH_LENGTH);
            continue;
        }
        /* a drafting step: the rows in order, each sampled as a step would (its logits in
         * s->logits), for as long as the sampler takes the drafted token; the K/V past the last
         * token taken goes (the positions are written again) */
        int nd = s->n_draft, p0 = s->kv.len - ch[i].n;
        s->n_draft = 0; /* this step's: read below from s->draft, gone with the sequence if it ends */
        for (int j = 0; j <= nd; j++) {
            int32_t t = -1;
            if (nd) {
                memcpy(s->logits, eng->draft_logits + (size_t)j * llm->c.vocab, sizeof(float) * (size_t)llm->c.vocab);
                s->kv.len = p0 + 1 + j;
            }
            int r = pm_seq_take_token(eng, i, &t, &e);
            if (r < 0) goto fail;
            if (r > 0 || j == nd || t != s->draft[j]) {
                /* a step of more rows streams the weights slower (5 rows: ~2.2 x a row's time on the
                 * 2-vCPU VM), so the next draft is as long as this one's taken part, twice that
                 * when all of it was taken */
                if (nd && r == 0) s->draft_room = j == nd ? 2 * nd : j > 0 ? j : 1;
                break;
            }
            eng->accepted++;
            if (s->draft_pred) s->pred_accepted++; /* the sequence lives on (r == 0) */
        }
        eng->drafted += nd;
    }
    free(ch);
    for (int i = 0; i < nc; i++) {
        free(rows[i]);
        free(tr[i].final_norm);
    }
    free(rows);
    free(tr);
    return eng->n;
fail:
    /* A failed step (out of memory, say) ends every live sequence with an error rather than
     * leaving them half-computed. */
    free(ch);
    for (int i = 0; rows && i < nc; i++) free(rows[i]);
    for (int i = 0; tr && i < nc; i++) free(tr[i].final_norm);
    free(rows);
    free(tr);
    /* no one request's fault: out of memory, or the engine's own failure */
    int cls = e.code == PM_ENOMEM ? PM_ENOMEM : PM_ESTATE;
    while (eng->n) pm_seq_fail(eng, eng->n - 1, cls, e.msg);
    return e.code ? e.code : PM_ESTATE;
}

int pm_generate(pm_model *m, const pm_request *req, const pm_engine_opts *opts, const pm_callbacks *cb, char *err, size_t errlen) {
    pm_engine *eng;
    int rc = pm_engine_new(&eng, m, opts, err, errlen);
    if (rc) return rc;
    rc = pm_engine_submit(eng, req, cb, NULL, err, errlen);
    while (!rc && pm_engine_live(eng) > 0) {
        int r = pm_engine_step(eng);
        if (r < 0) {
            if (err && errlen) snprintf(err, errlen, "generation failed (%s)", pm_status_name(r));
            rc = r;
        }
    }
    pm_engine_free(eng);
    return rc;
}

char *pm_chat_prompt(const char *system, const char *user) {
    size_t n = strlen(user) + (system ? strlen(system) : 0) + 64;
    char *p = malloc(n);
    if (!p) return NULL;
    if (system) snprintf(p, n, "<|system|>%s<|end|><|user|>%s<|end|><|assistant|>", system, user);
    else snprintf(p, n, "<|user|>%s<|end|><|assistant|>", user);
    return p;
}

const float *pm_engine_last_logits(const pm_engine *eng, int64_t seq_id, int *rope_long, int *kv_len) {
    for (int i = 0; i < eng->n; i++)
        if (eng->seqs[i]->id == seq_id) {
            if (rope_long) *rope_long = eng->seqs[i]->rope_long;
            if (kv_len) *kv_len = eng->seqs[i]->kv.len;
            return eng->seqs[i]->logits;
        }
    return NULL;
}

int pm_engine_seq_adapter(const pm_engine *eng, int64_t seq_id) {
    for (int i = 0; i < eng->n; i++)
        if (eng->seqs[i]->id == seq_id) return (int)eng->seqs[i]->prep.adapter;
    return -1;
}

void pm_engine_set_fault(pm_engine *eng, int fault) { eng->fault = (pm_fault)fault; }
