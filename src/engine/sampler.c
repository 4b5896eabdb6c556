/* sampler.c — see sampler.h. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int has_penalties(const pm_sampling *p) {
    return p->frequency_penalty != 0 || p->presence_penalty != 0 || (p->repetition_penalty > 0 && p->repetition_penalty != 1);
}

int pm_sampler_init(pm_sampler *s, const pm_sampling *p, const pm_logit_bias *bias, int n_bias, int vocab) {
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->state = p->seed ^ 0x5eedf00dULL;
    s->vocab = vocab;
    s->penalties = has_penalties(p);
    int fail = 0;
    if (p->temperature > 0) {
        s->idx = malloc(sizeof(int) * (size_t)vocab);
        s->prob = malloc(sizeof(float) * (size_t)vocab);
        fail |= !s->idx || !s->prob;
    }
    if (n_bias > 0 && (s->bias = malloc(sizeof *bias * (size_t)n_bias))) {
        memcpy(s->bias, bias, sizeof *bias * (size_t)n_bias);
        s->n_bias = n_bias;
    } else fail |= n_bias > 0;
    if (fail) {
        pm_sampler_free(s);
        return PM_ENOMEM;
    }
    return PM_OK;
}

void pm_sampler_free(pm_sampler *s) {
    free(s->idx);
    free(s->prob);
    free(s->bias);
    free(s->seen);
    free(s->slot);
    s->idx = NULL;
    s->prob = NULL;
    s->bias = NULL;
    s->seen = NULL;
    s->slot = NULL;
    s->n_bias = s->n_seen = s->n_slots = 0;
}

static uint32_t slot_of(int32_t t, int n_slots) { return ((uint32_t)t * 2654435761u) & (uint32_t)(n_slots - 1); }

/* The seen entry of token t, added when new; NULL when out of memory. */
static pm_seen_token *seen_entry(pm_sampler *s, int32_t t) {
    if (s->n_slots) /* open addressing, linear probing; slot holds the entry's index + 1 */
        for (uint32_t h = slot_of(t, s->n_slots);; h = (h + 1) & (uint32_t)(s->n_slots - 1)) {
            if (!s->slot[h]) break;
            if (s->seen[s->slot[h] - 1].token == t) return &s->seen[s->slot[h] - 1];
        }
    if (2 * (s->n_seen + 1) > s->n_slots) { /* at most half full: grow and rehash */
        int n = s->n_slots ? 2 * s->n_slots : 256;
        int32_t *slot = calloc((size_t)n, sizeof *slot);
        pm_seen_token *seen = realloc(s->seen, sizeof *seen * (size_t)(n / 2));
        if (!slot || !seen) {
            free(slot);
            if (seen) s->seen = seen;
            return NULL;
        }
        s->seen = seen;
        free(s->slot);
        s->slot = slot;
        s->n_slots = n;
        for (int i = 0; i < s->n_seen; i++) {
            uint32_t h = slot_of(s->seen[i].token, n);
            while (slot[h]) h = (h + 1) & (uint32_t)(n - 1);
            slot[h] = i + 1;
        }
    }
    uint32_t h = slot_of(t, s->n_slots);
    while (s->slot[h]) h = (h + 1) & (uint32_t)(s->n_slots - 1);
    pm_seen_token *e = &s->seen[s->n_seen];
    e->token = t;
    e->count = 0;
    s->slot[h] = ++s->n_seen;
    return e;
}

int pm_sampler_prompt(pm_sampler *s, const int32_t *ids, int n) {
    if (!s->penalties) return PM_OK;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < s->vocab && !seen_entry(s, ids[i])) return PM_ENOMEM;
    return PM_OK;
}

int pm_sampler_accept(pm_sampler *s, int32_t token) {
    if (!s->penalties || token < 0 || token >= s->vocab) return PM_OK;
    pm_seen_token *e = seen_entry(s, token);
    if (!e) return PM_ENOMEM;
    e->count++;
    return PM_OK;
}

int pm_sampler_modifies(const pm_sampler *s) { return (s->p.temperature > 0 && s->idx) || s->n_bias > 0 || s->penalties; }

void pm_sampler_penalize(const pm_sampler *s, float *logits) {
    for (int i = 0; i < s->n_bias; i++) logits[s->bias[i].token] += s->bias[i].bias;
    float rep = s->p.repetition_penalty > 0 ? s->p.repetition_penalty : 1.0f;
    for (int i = 0; i < s->n_seen; i++) {
        const pm_seen_token *e = &s->seen[i];
        float x = logits[e->token];
        if (rep != 1.0f) x = x > 0 ? x / rep : x * rep; /* the prompt's tokens and the output's */
        if (e->count) x -= (float)e->count * s->p.frequency_penalty + s->p.presence_penalty;
        logits[e->token] = x;
    }
}

int32_t pm_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

double pm_logsumexp(const float *x, int n) {
    float mx = x[pm_argmax(x, n)];
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

void pm_log_softmax(const float *x, int n, float *out) {
    double lz = pm_logsumexp(x, n);
    for (int i = 0; i < n; i++) out[i] = (float)((double)x[i] - lz);
}

double pm_kl_divergence(const float *lp, const float *x, int n) {
    double lz = pm_logsumexp(x, n), acc = 0;
    for (int i = 0; i < n; i++) {
        double p = exp((double)lp[i]);
        if (p > 0) acc += p * ((double)lp[i] - ((double)x[i] - lz));
    }
    return acc > 0 ? acc : 0; /* a rounding below 0 is 0 */
}

int pm_top_k(const float *x, int n, int k, pm_logprob *out) {
    if (k > PM_MAX_TOP_LOGPROBS) k = PM_MAX_TOP_LOGPROBS;
    if (k > n) k = n;
    int m = 0; /* out[0..m) sorted: larger first, then lower index */
    for (int i = 0; i < n && k > 0; i++) {
        if (m == k && !(x[i] > out[m - 1].logprob)) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && x[i] > out[j - 1].logprob) {
            out[j] = out[j - 1];
            j--;
        }
        out[j].token = i;
        out[j].logprob = x[i];
    }
    for (int q = 0; q < m; q++) /* every larger value is before it: ties share a rank */
        out[q].rank = q > 0 && out[q].logprob == out[q - 1].logprob ? out[q - 1].rank : q + 1;
    return m;
}

int32_t pm_rank(const float *x, int n, int32_t t) {
    int32_t r = 1;
    float v = x[t];
    for (int i = 0; i < n; i++) r += x[i] > v;
    return r;
}

static int cmp_desc(const void *a, const void *b, void *arg) {
    const float *base = arg;
    float x = base[*(const int *)a], y = base[*(const int *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* Moves the m largest of logits[idx[0..V)] to idx[0..m) (in no order): quickselect. */
static void select_largest(int *idx, int V, int m, const float *logits) {
    int lo = 0, hi = V - 1, want = m - 1;
    while (lo < hi) {
        float pivot = logits[idx[(lo + hi) / 2]];
        int i = lo, j = hi;
        while (i <= j) {
            while (logits[idx[i]] > pivot) i++;
            while (logits[idx[j]] < pivot) j--;
            if (i <= j) {
                int t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
}

/* One draw from prob[0..n) (unnormalised, summing to sum) over the tokens idx[0..n), or over
 * tokens 0..n when idx is NULL. */
static int32_t draw(pm_sampler *s, const float *prob, const int *idx, int n, float sum) {
    double r = (double)(splitmix64(&s->state) >> 11) / 9007199254740992.0 * sum, c = 0.0;
    for (int i = 0; i < n; i++) {
        c += prob[i];
        if (r < c) return idx ? idx[i] : i;
    }
    return idx ? idx[n - 1] : n - 1;
}

/* How many of the n candidates prob[] (sorted, largest first, relative to the largest) min-p keeps
 * (at least one); their mass in *sum. */
static int min_p_cut(const float *prob, int n, float min_p, float *sum) {
    while (n > 1 && prob[n - 1] < min_p) *sum -= prob[--n];
    return n;
}

int32_t pm_sampler_next(pm_sampler *s, float *logits) {
    int V = s->vocab;
    pm_sampler_penalize(s, logits);
    if (s->p.temperature <= 0 || !s->idx) return pm_argmax(logits, V);
    float invt = 1.0f / s->p.temperature;
    for (int i = 0; i < V; i++) logits[i] *= invt;
    int k = (s->p.top_k > 0 && s->p.top_k < V) ? s->p.top_k : V, nucleus = s->p.top_p > 0 && s->p.top_p < 1.0f;
    /* min-p last (as Hugging Face's warpers run): prob[] is exp(logit - the largest), each token's
     * likelihood relative to the most likely one's, which top-k and top-p keep */
    float min_p = s->p.min_p > 0 && s->p.min_p <= 1.0f ? s->p.min_p : 0.0f;
    if (k == V && !nucleus) { /* every token: the softmax in index order and one draw, no sort (a sort of 200,064 was ~35 ms a token) */
        float mx = logits[pm_argmax(logits, V)], sum = 0.0f;
        for (int i = 0; i < V; i++) {
            float p = expf(logits[i] - mx);
            sum += (s->prob[i] = p >= min_p ? p : 0.0f);
        }
        return draw(s, s->prob, NULL, V, sum);
    }
    for (int i = 0; i < V; i++) s->idx[i] = i;
    float total = 0.0f;
    if (k == V) { /* the nucleus of all tokens: the mass they all hold, then the largest few sorted, more until it reaches top_p */
        float mx = logits[pm_argmax(logits, V)];
        for (int i = 0; i < V; i++) total += expf(logits[i] - mx);
        int m = 256 < V ? 256 : V;
        for (;;) {
            select_largest(s->idx, V, m, logits);
            qsort_r(s->idx, (size_t)m, sizeof(int), cmp_desc, logits);
            float c = 0.0f;
            int n = 0;
            while (n < m && c < s->p.top_p * total) c += (s->prob[n] = expf(logits[s->idx[n]] - mx)), n++;
            if (c >= s->p.top_p * total || m == V) {
                n = min_p_cut(s->prob, n, min_p, &c);
                return draw(s, s->prob, s->idx, n, c);
            }
            m = m < V / 8 ? m * 8 : V;
        }
    }
    /* top-k: the k largest by partial selection, sorted; then top-p within them */
    select_largest(s->idx, V, k, logits);
    qsort_r(s->idx, (size_t)k, sizeof(int), cmp_desc, logits);
    float mx = logits[s->idx[0]];
    for (int i = 0; i < k; i++) total += (s->prob[i] = expf(logits[s->idx[i]] - mx));
    int n = k;
    float sum = total;
    if (nucleus) { /* keep the smallest prefix whose mass reaches top_p (at least one token) */
        float c = 0.0f;
        for (n = 0; n < k && c < s->p.top_p * total;) c += s->prob[n++];
        sum = c;
    }
    n = min_p_cut(s->prob, n, min_p, &sum);
    return draw(s, s->prob, s->idx, n, sum);
}
