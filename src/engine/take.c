/* take.c — what a sampled token does to its sequence: the masks that held it (JSON mode, guided
 * patterns), min_tokens and ignore_eos, allowed_token_ids and bad_words, its log-probabilities, its
 * text through the stop strings, and whether the request ends with it (an end token, a stop token
 * or string, max_tokens, a lazy value's close). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/seq.h"
#include "nn/ops.h"

/* Appends what the detokenizer still holds (bytes of an unfinished character) to *txt. */
static int flush_onto(pm_tok_stream *st, char **txt, size_t *tl, pm_err *e) {
    char *t2 = NULL;
    size_t l2 = 0;
    int rc = pm_tok_stream_flush(st, &t2, &l2, e);
    if (!rc && l2) {
        char *cat = realloc(*txt, *tl + l2 + 1);
        if (!cat) rc = pm_errf(e, PM_ENOMEM, "out of memory for the text");
        else {
            memcpy(cat + *tl, t2, l2);
            cat[*tl + l2] = 0;
            *txt = cat;
            *tl += l2;
        }
    }
    free(t2);
    return rc;
}

/* Emits text through on_token, holding back any tail that could begin a stop string.
 * Returns 1 when a stop string was completed (the text before it is emitted, and the string
 * itself with stop_in_output; the earliest one wins, the first listed at a tie). */
static int emit_text(pm_seq *s, int32_t tok, const char *txt, size_t len, int final, int *cancel) {
    char *nh = realloc(s->hold, s->hold_len + len + 1);
    if (!nh) return 0;
    s->hold = nh;
    memcpy(s->hold + s->hold_len, txt, len);
    s->hold_len += len;
    s->hold[s->hold_len] = 0;
    size_t emit = s->hold_len, cut = (size_t)-1, cut_len = 0;
    for (int i = 0; i < s->n_stop; i++) {
        char *p = strstr(s->hold, s->stop[i]);
        if (p && (size_t)(p - s->hold) < cut) {
            cut = (size_t)(p - s->hold);
            cut_len = strlen(s->stop[i]);
        }
    }
    if (cut != (size_t)-1) emit = cut + (s->stop_in_output ? cut_len : 0);
    else if (!final)
        for (int i = 0; i < s->n_stop; i++) {
            size_t sl = strlen(s->stop[i]);
            for (size_t k = sl - 1; k > 0; k--) /* longest suffix of hold that is a prefix of stop[i] */
                if (k <= s->hold_len && !memcmp(s->hold + s->hold_len - k, s->stop[i], k)) {
                    if (s->hold_len - k < emit) emit = s->hold_len - k;
                    break;
                }
        }
    if (s->cb.on_token && s->cb.on_token(s->cb.user, tok, s->hold, emit)) *cancel = 1;
    memmove(s->hold, s->hold + emit, s->hold_len - emit);
    s->hold_len -= emit;
    s->hold[s->hold_len] = 0;
    return cut != (size_t)-1;
}

/* The chosen token's log-probability and the top ones' from the model's logits (raw[vocab]). */
static void report_logprobs(pm_seq *s, const float *raw, int vocab, int32_t t) {
    pm_logprob top[PM_MAX_TOP_LOGPROBS];
    double lse = pm_logsumexp(raw, vocab);
    int n = pm_top_k(raw, vocab, s->top_logprobs, top);
    for (int k = 0; k < n; k++) top[k].logprob = (float)(top[k].logprob - lse);
    pm_logprob chosen = {t, (float)(raw[t] - lse), pm_rank(raw, vocab, t)};
    s->cb.on_logprobs(s->cb.user, chosen, top, n);
}

static int is_eos(const pm_llm_config *c, int32_t t) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == t) return 1;
    return 0;
}

static int is_stop_id(const pm_seq *s, int32_t t) {
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == t) return 1;
    return 0;
}

int pm_seq_take_token(pm_engine *eng, int i, int32_t *out, pm_err *e) {
    const pm_llm *llm = &eng->m->llm;
    pm_seq *s = eng->seqs[i];
    const float *raw = s->logits; /* the model's logits, for the log-probabilities */
    if (s->lp_logits) raw = memcpy(s->lp_logits, s->logits, sizeof(float) * (size_t)llm->c.vocab);
    if (s->json) { /* the end tokens, and a lazy value's closing one, once the value is complete */
        int32_t ends[PM_MAX_EOS + 1];
        int n_ends = llm->c.n_eos;
        memcpy(ends, llm->c.eos_ids, sizeof(int32_t) * (size_t)n_ends);
        if (s->json_close >= 0) ends[n_ends++] = s->json_close;
        pm_json_mask(&s->json_state, eng->json_vocab, ends, n_ends, s->logits, eng->json_allow);
    }
    if (s->regex) pm_regex_mask(s->regex, s->rx_state, eng->regex_vocab, s->rx_masks, llm->c.eos_ids, llm->c.n_eos, s->logits, eng->json_allow);
    if (s->gstate) {
        pm_err ge = {0};
        if (pm_grammar_mask(s->gstate, eng->grammar_vocab, llm->c.eos_ids, llm->c.n_eos, s->logits, eng->json_allow, &ge)) {
            pm_seq_fail(eng, i, ge.code, ge.msg);
            return 1;
        }
    }
    /* min_tokens and ignore_eos yield to a held output that is complete: nothing but the end may follow it */
    int early = s->n_gen < s->min_tokens;
    if ((early || s->ignore_eos) && !(s->json && pm_json_done(&s->json_state)) && !(s->regex && pm_regex_final(s->regex, s->rx_state)) &&
        !(s->gstate && pm_grammar_final(s->gstate))) {
        for (int k = 0; k < llm->c.n_eos; k++) s->logits[llm->c.eos_ids[k]] = -INFINITY;
        for (int k = 0; early && k < s->n_stop_ids; k++) s->logits[s->stop_ids[k]] = -INFINITY;
    }
    pm_restrict_apply(&s->bans, s->tokens + s->n_prompt, s->n_gen, s->logits, llm->c.vocab);
    int32_t t = pm_sampler_next(&s->sampler, s->logits);
    if (isinf(s->logits[t]) && s->logits[t] < 0) { /* every token banned (a held value alone cannot: the vocabulary is byte-level) */
        pm_seq_fail(eng, i, PM_EINVAL,
                    s->bans.allowed || s->bans.n_bad
                          ? "no token may come here: allowed_token_ids, bad_words and the other bans exclude them all"
                      : s->json                        ? "JSON mode: no token of the vocabulary continues the value"
                      : s->regex                       ? "guided decoding: no token of the vocabulary continues the pattern"
                      : s->gstate                      ? "grammar: no token of the vocabulary continues the grammar"
                                                       : "no token may come here: every one is banned");
        return 1;
    }
    int eos = is_eos(&llm->c, t);
    if (s->top_logprobs >= 0 && (!eos || s->logprobs_eos)) report_logprobs(s, raw, llm->c.vocab, t);
    if (eos) {
        char *txt = NULL;
        size_t tl = 0;
        int cancel = 0;
        /* the end token's own text (a special token's only with keep_special) where the output keeps it */
        if ((!s->stop_in_output || !pm_tok_stream_push(s->stream, t, &txt, &tl, e)) && !flush_onto(s->stream, &txt, &tl, e))
            emit_text(s, t, txt ? txt : "", tl, 1, &cancel);
        free(txt);
        pm_seq_finish(eng, i, PM_FINISH_STOP);
        return 1;
    }
    s->tokens[s->n_tokens++] = t;
    s->n_gen++;
    if (pm_sampler_accept(&s->sampler, t)) {
        pm_seq_fail(eng, i, PM_ENOMEM, "out of memory for the penalties' table of the generated tokens");
        return 1;
    }
    int closed = s->json && t == s->json_close; /* a lazy value's end: the request's too */
    if (s->json && !closed) { /* the mask let only continuations through */
        size_t bl = 0;
        const char *b = pm_tok_token_bytes(eng->m->tok, t, &bl);
        pm_json_feed(&s->json_state, b, bl);
    } else if (s->regex) {
        size_t bl = 0;
        const char *b = pm_tok_token_bytes(eng->m->tok, t, &bl);
        s->rx_state = pm_regex_feed(s->regex, s->rx_state, b, bl);
    } else if (s->gstate) {
        size_t bl = 0;
        const char *b = pm_tok_token_bytes(eng->m->tok, t, &bl);
        pm_err ge = {0};
        if (pm_grammar_feed(s->gstate, b, bl, &ge) < 0) {
            pm_seq_fail(eng, i, ge.code, ge.msg);
            return 1;
        }
    } else if (!s->json && t == s->json_open) { /* the model begins a lazy value: held from here on */
        s->json = 1;
        pm_json_init(&s->json_state, s->schema ? pm_json_schema_root(s->schema) : pm_json_any_object());
    }
    char *txt = NULL;
    size_t tl = 0;
    int stop_tok = is_stop_id(s, t); /* a stop token ends the request; its text only where the output keeps it */
    int cancel = 0, stopped = 0, last = s->n_gen >= s->max_tokens || s->n_tokens >= s->max_context || closed || stop_tok;
    if ((!stop_tok || s->stop_in_output) && pm_tok_stream_push(s->stream, t, &txt, &tl, e)) return -1;
    if (last) flush_onto(s->stream, &txt, &tl, e); /* what the detokenizer still holds */
    stopped = emit_text(s, t, txt ? txt : "", tl, last, &cancel);
    free(txt);
    *out = t;
    if (stopped || closed || stop_tok) pm_seq_finish(eng, i, PM_FINISH_STOP);
    else if (cancel) pm_seq_finish(eng, i, PM_FINISH_CANCELLED);
    else if (last) pm_seq_finish(eng, i, PM_FINISH_LENGTH);
    return stopped || closed || cancel || last;
}
