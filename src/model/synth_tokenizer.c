/* synth_tokenizer.c — see synth_tokenizer.h.
 *
 * Merges are learned by plain BPE training on an embedded English text: the text is cut into
 * pieces the way the o200k pre-tokenizer cuts ASCII text (a word with its leading space or
 * punctuation mark, 1-3 digits, punctuation runs, whitespace runs), then the most frequent adjacent
 * pair (ties: smallest ids) is merged again and again while some pair occurs at least twice. A pair
 * whose concatenation is already a token is never chosen, so every token string is unique and the
 * vocabulary is exactly 256 + merges. The result is fixed at build time (no randomness). */
#include "synth_tokenizer.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Training text: plain English prose of our own. */
static const char *const corpus[] = {
    "The morning was cold and clear, and the sun came up slowly over the hills behind the town. ",
    "People walked to work with their hands in their pockets, talking about the weather and the news. ",
    "In the small shop at the corner of the street, a woman was selling bread, coffee and fresh fruit. ",
    "She said that the best time to visit the market is early in the day, before the crowds arrive. ",
    "Children were running to school, and their parents were waving from the windows of the houses. ",
    "This is a simple story about a quiet place where nothing important seems to happen, ",
    "but where every person has something interesting to say if you take the time to listen. ",
    "The teacher asked the students to write a short letter to a friend who lives in another country. ",
    "Some of them wrote about their families, some about their favorite books, and some about music. ",
    "One student wrote: \"I would like to travel around the world and learn how other people live.\" ",
    "When the lesson was over, they went outside to play in the garden until the bell rang again.\n",
    "Hello! How can I help you today? I am an assistant, and I will answer your questions as well as I can. ",
    "Please tell me what you need, and I will do my best to explain it in a clear and helpful way. ",
    "If the question is about science, history, language or computers, I can give you some information. ",
    "For example, water boils at 100 degrees at sea level, and the year has 365 days and 12 months. ",
    "The first computers were very large machines that filled entire rooms and used a lot of power. ",
    "Today a small phone in your pocket is much faster than those machines, and it can do many things.\n",
    "In the evening the family sat together at the table and shared a simple dinner of soup and rice. ",
    "The father told a story about his own childhood, when he lived on a farm far away from the city. ",
    "He remembered the animals, the long summer days, the sound of the rain on the roof at night, ",
    "and the feeling of being part of something larger than himself. The children listened carefully. ",
    "After dinner they read books, played games and talked about their plans for the next weekend. ",
    "It is important to sleep well, to eat good food, to move every day and to spend time with friends. ",
    "These are the things that make life better, and they do not cost much money at all.\n",
    "The city council met on Tuesday to discuss the new plan for public transport and the central park. ",
    "Many citizens came to the meeting because they wanted to hear what the members had decided. ",
    "The mayor explained that the project would take three years and that the work would start soon. ",
    "Several people asked questions about the cost, the traffic and the trees that would be planted. ",
    "There was a long discussion, but in the end most of the people agreed that the idea was good.\n",
    "Learning a new language takes patience. You should read a little every day, listen to the radio, ",
    "watch films with subtitles and try to speak with other people even when you make mistakes. ",
    "Nobody learns without making mistakes, and every mistake is a chance to understand something new. ",
    "Words that seem difficult at first become natural after you have used them a few times.\n",
    "Thank you for reading. We hope that you have enjoyed these short texts and that they were useful. ",
    "Please let us know what you think, and have a wonderful day.\n",
    NULL,
};

static int is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_nl(unsigned char c) { return c == '\n' || c == '\r'; }

/* Length of the piece starting at s (ASCII approximation of the o200k pre-tokenizer). */
static size_t piece_len(const unsigned char *s) {
    size_t i = 0;
    if (is_letter(s[0]) || (!is_nl(s[0]) && !is_digit(s[0]) && !is_letter(s[0]) && is_letter(s[1]))) {
        if (!is_letter(s[0])) i = 1;
        while (is_letter(s[i])) i++;
        if (s[i] == '\'') {
            static const char *const ctr[] = {"s", "t", "re", "ve", "m", "ll", "d"};
            for (int k = 0; k < 7; k++) {
                size_t l = strlen(ctr[k]);
                if (!strncmp((const char *)s + i + 1, ctr[k], l)) {
                    i += 1 + l;
                    break;
                }
            }
        }
        return i;
    }
    if (is_digit(s[0])) {
        while (i < 3 && is_digit(s[i])) i++;
        return i;
    }
    if (!is_space(s[0]) || (s[0] == ' ' && s[1] && !is_space(s[1]) && !is_letter(s[1]) && !is_digit(s[1]))) {
        if (s[0] == ' ') i = 1;
        while (s[i] && !is_space(s[i]) && !is_letter(s[i]) && !is_digit(s[i])) i++;
        while (is_nl(s[i]) || s[i] == '/') i++;
        return i;
    }
    while (is_space(s[i])) i++;
    /* a space run followed by a word gives its last space to the word */
    if (i > 1 && s[i] && s[i - 1] == ' ') i--;
    return i;
}

/* ---- tokens ------------------------------------------------------------------------------- */

typedef struct tok {
    unsigned char bytes[64];
    int len;
} tok;

typedef struct word {
    int *ids;
    int n;
    int count;
} word;

typedef struct trainer {
    tok toks[256 + PM_SYNTH_TOK_MAX_MERGES];
    int n_toks;
    int merges[PM_SYNTH_TOK_MAX_MERGES][2];
    int n_merges;
    word *words;
    int n_words;
} trainer;

/* GPT-2 bytes_to_unicode: byte -> code point, and the byte order of ids 0..255. */
static void byte_alphabet(uint32_t cp[256], int order[256]) {
    int n = 0, extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (printable) cp[b] = (uint32_t)b;
    }
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (!printable) cp[b] = 256u + (uint32_t)extra++;
    }
    /* ids follow increasing code point: printable bytes first, then the remapped ones */
    for (int b = 0; b < 256; b++)
        if (cp[b] < 256) order[n++] = b;
    for (int b = 0; b < 256; b++)
        if (cp[b] >= 256) order[n++] = b;
}

/* Byte-level string (UTF-8 of the mapped code points) of raw bytes. */
static void byte_level(const uint32_t cp[256], const unsigned char *b, int len, char *out) {
    char *p = out;
    for (int i = 0; i < len; i++) {
        uint32_t c = cp[b[i]];
        if (c < 0x80) *p++ = (char)c;
        else {
            *p++ = (char)(0xC0 | (c >> 6));
            *p++ = (char)(0x80 | (c & 0x3F));
        }
    }
    *p = 0;
}

static int find_tok(const trainer *t, const unsigned char *b, int len) {
    for (int i = 0; i < t->n_toks; i++)
        if (t->toks[i].len == len && !memcmp(t->toks[i].bytes, b, (size_t)len)) return i;
    return -1;
}

typedef struct pairc {
    int a, b, count;
} pairc;

static int cmp_pair(const void *x, const void *y) {
    const pairc *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    return p->b < q->b ? -1 : p->b > q->b;
}

/* One training step: merges the best admissible pair; returns 0 when none occurs twice. */
static int train_step(trainer *t, pairc *buf) {
    int np = 0;
    for (int w = 0; w < t->n_words; w++)
        for (int i = 0; i + 1 < t->words[w].n; i++)
            buf[np++] = (pairc){t->words[w].ids[i], t->words[w].ids[i + 1], t->words[w].count};
    if (!np) return 0;
    qsort(buf, (size_t)np, sizeof *buf, cmp_pair);
    int best = -1, best_count = 1;
    for (int i = 0; i < np;) {
        int j = i, c = 0;
        while (j < np && buf[j].a == buf[i].a && buf[j].b == buf[i].b) c += buf[j++].count;
        if (c > best_count) {
            const tok *x = &t->toks[buf[i].a], *y = &t->toks[buf[i].b];
            unsigned char cat[128];
            int len = x->len + y->len;
            if (len <= (int)sizeof t->toks[0].bytes) {
                memcpy(cat, x->bytes, (size_t)x->len);
                memcpy(cat + x->len, y->bytes, (size_t)y->len);
                if (find_tok(t, cat, len) < 0) {
                    best = i;
                    best_count = c;
                }
            }
        }
        i = j;
    }
    if (best < 0) return 0;
    int a = buf[best].a, b = buf[best].b, id = t->n_toks++;
    tok *nt = &t->toks[id];
    nt->len = t->toks[a].len + t->toks[b].len;
    memcpy(nt->bytes, t->toks[a].bytes, (size_t)t->toks[a].len);
    memcpy(nt->bytes + t->toks[a].len, t->toks[b].bytes, (size_t)t->toks[b].len);
    t->merges[t->n_merges][0] = a;
    t->merges[t->n_merges][1] = b;
    t->n_merges++;
    for (int w = 0; w < t->n_words; w++) {
        word *wd = &t->words[w];
        int o = 0;
        for (int i = 0; i < wd->n; i++) {
            if (i + 1 < wd->n && wd->ids[i] == a && wd->ids[i + 1] == b) {
                wd->ids[o++] = id;
                i++;
            } else wd->ids[o++] = wd->ids[i];
        }
        wd->n = o;
    }
    return 1;
}

/* Cuts the corpus into distinct pieces with counts; the byte ids use `id_of_byte`. */
static int collect_words(trainer *t, const int id_of_byte[256], pm_err *e) {
    size_t total = 0;
    for (int i = 0; corpus[i]; i++) total += strlen(corpus[i]);
    char *text = malloc(total + 1);
    if (!text) return pm_errf(e, PM_ENOMEM, "tokenizer: out of memory");
    text[0] = 0;
    for (int i = 0; corpus[i]; i++) strcat(text, corpus[i]);
    t->words = calloc(total + 1, sizeof *t->words);
    if (!t->words) {
        free(text);
        return pm_errf(e, PM_ENOMEM, "tokenizer: out of memory");
    }
    const unsigned char *s = (const unsigned char *)text;
    for (size_t pos = 0; s[pos];) {
        size_t len = piece_len(s + pos);
        PM_ASSERT(len > 0);
        int found = -1;
        for (int w = 0; w < t->n_words && found < 0; w++) {
            word *wd = &t->words[w];
            if ((size_t)wd->n != len) continue;
            size_t k = 0;
            while (k < len && wd->ids[k] == id_of_byte[s[pos + k]]) k++;
            if (k == len) found = w;
        }
        if (found >= 0) t->words[found].count++;
        else {
            word *wd = &t->words[t->n_words];
            wd->ids = malloc(sizeof(int) * len);
            if (!wd->ids) {
                free(text);
                return pm_errf(e, PM_ENOMEM, "tokenizer: out of memory");
            }
            for (size_t k = 0; k < len; k++) wd->ids[k] = id_of_byte[s[pos + k]];
            wd->n = (int)len;
            wd->count = 1;
            t->n_words++;
        }
        pos += len;
    }
    free(text);
    return PM_OK;
}

/* ---- JSON --------------------------------------------------------------------------------- */

static const char *const o200k_regex =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct {
    int id;
    const char *content;
} phi_special[] = {
    {199999, "<|endoftext|>"}, {200010, "<|endoftext10|>"}, {200011, "<|endoftext11|>"}, {200018, "<|endofprompt|>"},
    {200019, "<|assistant|>"}, {200020, "<|end|>"},         {200021, "<|user|>"},        {200022, "<|system|>"},
    {200023, "<|tool|>"},      {200024, "<|/tool|>"},       {200025, "<|tool_call|>"},   {200026, "<|/tool_call|>"},
    {200027, "<|tool_response|>"}, {200028, "<|tag|>"},
};

static json_t *build_json(const trainer *t, const uint32_t cp[256]) {
    json_t *root = json_object();
    json_object_set_new(root, "version", json_string("1.0"));
    json_object_set_new(root, "truncation", json_null());
    json_object_set_new(root, "padding", json_null());
    json_t *added = json_array();
    for (size_t i = 0; i < sizeof phi_special / sizeof phi_special[0]; i++)
        json_array_append_new(added, json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", phi_special[i].id, "content",
                                               phi_special[i].content, "single_word", 0, "lstrip", 0, "rstrip", 0,
                                               "normalized", 0, "special", 1));
    json_object_set_new(root, "added_tokens", added);
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(root, "pre_tokenizer",
                        json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b,s:b,s:b}]}", "type", "Sequence", "pretokenizers",
                                  "type", "Split", "pattern", "Regex", o200k_regex, "behavior", "Isolated", "invert", 0,
                                  "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0));
    json_object_set_new(root, "post_processor", json_null());
    json_object_set_new(root, "decoder", json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", 1,
                                                   "trim_offsets", 1, "use_regex", 1));
    json_t *vocab = json_object(), *merges = json_array();
    char s[64 * 2 + 1], s2[64 * 2 + 1], m[sizeof s * 2 + 2];
    for (int i = 0; i < t->n_toks; i++) {
        byte_level(cp, t->toks[i].bytes, t->toks[i].len, s);
        json_object_set_new(vocab, s, json_integer(i));
    }
    for (size_t i = 0; i < sizeof phi_special / sizeof phi_special[0]; i++)
        json_object_set_new(vocab, phi_special[i].content, json_integer(phi_special[i].id));
    for (int i = 0; i < t->n_merges; i++) {
        const tok *a = &t->toks[t->merges[i][0]], *b = &t->toks[t->merges[i][1]];
        byte_level(cp, a->bytes, a->len, s);
        byte_level(cp, b->bytes, b->len, s2);
        snprintf(m, sizeof m, "%s %s", s, s2);
        json_array_append_new(merges, json_string(m));
    }
    json_t *model = json_pack("{s:s,s:n,s:n,s:n,s:n,s:b,s:b,s:b}", "type", "BPE", "dropout", "unk_token",
                              "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                              "ignore_merges", 0);
    json_object_set_new(model, "vocab", vocab);
    json_object_set_new(model, "merges", merges);
    json_object_set_new(root, "model", model);
    return root;
}

int pm_synth_tokenizer_json(char **json, int *n_ordinary, pm_err *e) {
    *json = NULL;
    *n_ordinary = 0;
    uint32_t cp[256];
    int order[256], id_of_byte[256];
    byte_alphabet(cp, order);
    trainer *t = calloc(1, sizeof *t);
    if (!t) return pm_errf(e, PM_ENOMEM, "tokenizer: out of memory");
    for (int i = 0; i < 256; i++) {
        t->toks[i].bytes[0] = (unsigned char)order[i];
        t->toks[i].len = 1;
        id_of_byte[order[i]] = i;
    }
    t->n_toks = 256;
    int rc = collect_words(t, id_of_byte, e);
    pairc *buf = NULL;
    if (!rc) {
        size_t np = 0;
        for (int w = 0; w < t->n_words; w++) np += (size_t)t->words[w].n;
        buf = malloc(sizeof *buf * (np + 1));
        if (!buf) rc = pm_errf(e, PM_ENOMEM, "tokenizer: out of memory");
    }
    while (!rc && t->n_merges < PM_SYNTH_TOK_MAX_MERGES && train_step(t, buf)) {}
    if (!rc) {
        json_t *root = build_json(t, cp);
        *json = root ? json_dumps(root, JSON_COMPACT) : NULL;
        json_decref(root);
        if (!*json) rc = pm_errf(e, PM_ENOMEM, "tokenizer: cannot serialise tokenizer.json");
        else *n_ordinary = t->n_toks;
    }
    free(buf);
    for (int w = 0; w < t->n_words; w++) free(t->words[w].ids);
    free(t->words);
    free(t);
    return rc;
}
