/* audio_form.c — see audio_form.h. */
#include "audio_form.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "chat_parse.h"
#include "json_util.h"
#include "tok/chat.h"

enum { MAX_FIELD = 8192 };

static const char *const LANGS[][2] = {
    {"en", "English"},   {"zh", "Chinese"},   {"de", "German"},     {"fr", "French"},   {"it", "Italian"},   {"ja", "Japanese"},
    {"es", "Spanish"},   {"pt", "Portuguese"}, {"ar", "Arabic"},    {"cs", "Czech"},    {"da", "Danish"},    {"nl", "Dutch"},
    {"fi", "Finnish"},   {"he", "Hebrew"},    {"hu", "Hungarian"},  {"ko", "Korean"},   {"no", "Norwegian"}, {"pl", "Polish"},
    {"ru", "Russian"},   {"sv", "Swedish"},   {"th", "Thai"},       {"tr", "Turkish"},  {"uk", "Ukrainian"},
};

int srv_language_name(const char *in, char *out, size_t cap) {
    size_t n = strlen(in);
    if (n == 0 || n >= cap || n > 32) return -1;
    for (size_t i = 0; i < sizeof LANGS / sizeof LANGS[0]; i++)
        if (!strcasecmp(in, LANGS[i][0]) || !strcasecmp(in, LANGS[i][1])) {
            snprintf(out, cap, "%s", LANGS[i][1]);
            return 0;
        }
    for (size_t i = 0; i < n; i++)
        if (!isalpha((unsigned char)in[i]) && in[i] != ' ' && in[i] != '-') return -1;
    snprintf(out, cap, "%s", in);
    out[0] = (char)toupper((unsigned char)out[0]);
    return 0;
}

void srv_audio_req_free(srv_audio_req *r) {
    free(r->prompt);
    memset(r, 0, sizeof *r);
}

/* A text field as a NUL-terminated copy in buf (bounded, valid UTF-8, no NUL bytes). */
static int field_text(const srv_part *p, char *buf, size_t cap, srv_error *e) {
    if (p->len >= cap) return srv_bad(e, p->name, "invalid_value", "form field '%s' is longer than %zu bytes", p->name, cap - 1);
    if (memchr(p->data, 0, p->len) || srv_utf8_valid_prefix((const char *)p->data, p->len) != p->len)
        return srv_bad(e, p->name, "invalid_value", "form field '%s' must be UTF-8 text", p->name);
    memcpy(buf, p->data, p->len);
    buf[p->len] = 0;
    return 0;
}

static int parse_bool(const char *s, int *out) {
    if (!strcasecmp(s, "true") || !strcmp(s, "1")) *out = 1;
    else if (!strcasecmp(s, "false") || !strcmp(s, "0")) *out = 0;
    else return -1;
    return 0;
}

int srv_audio_ignored(const srv_part *parts, int n, char *out, size_t cap) {
    static const char *const read[] = {"file", "model", "prompt", "language", "response_format", "temperature", "stream", "max_tokens",
                                       "chunking_strategy", "include[]", "include", "timestamp_granularities[]",
                                       "timestamp_granularities", NULL};
    const char *const *const lists[] = {read, NULL};
    int k = 0;
    if (cap) out[0] = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0; /* a field sent twice is named once */
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(parts[j].name, parts[i].name);
        if (seen || srv_field_listed(parts[i].name, lists)) continue;
        k++;
        if (cap) srv_field_note(parts[i].name, out, cap);
    }
    return k;
}

int srv_audio_parse(const srv_part *parts, int n, int translate, srv_audio_req *out, srv_error *e) {
    memset(out, 0, sizeof *out);
    out->translate = translate;
    const srv_part *f = srv_multipart_find(parts, n, "file");
    if (!f) return srv_bad(e, "file", "missing_required_parameter", "the form field 'file' (the audio file) is required");
    if (f->len == 0) return srv_bad(e, "file", "invalid_value", "the uploaded audio file is empty");
    out->file = f->data;
    out->file_len = f->len;
    snprintf(out->filename, sizeof out->filename, "%s", f->filename[0] ? f->filename : "audio");
    char *buf = malloc(MAX_FIELD);
    if (!buf) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    const srv_part *p;
    int rc = 0;
    char instruction[MAX_FIELD + 64] = "";
    if ((p = srv_multipart_find(parts, n, "model"))) rc = field_text(p, buf, 256, e); /* any name: one model is served */
    if (!rc && (p = srv_multipart_find(parts, n, "language"))) {
        if (!(rc = field_text(p, buf, 64, e)) && buf[0] && srv_language_name(buf, out->language, sizeof out->language))
            rc = srv_bad(e, "language", "invalid_value", "language '%s' is not an ISO 639-1 code or a language name", buf);
    }
    if (translate && !out->language[0]) snprintf(out->language, sizeof out->language, "English");
    if (!rc && (p = srv_multipart_find(parts, n, "response_format"))) {
        if (!(rc = field_text(p, buf, 32, e))) {
            if (!strcmp(buf, "json")) out->format = SRV_RF_JSON;
            else if (!strcmp(buf, "text")) out->format = SRV_RF_TEXT;
            else if (!strcmp(buf, "verbose_json")) out->format = SRV_RF_VERBOSE_JSON;
            else if (!strcmp(buf, "srt")) out->format = SRV_RF_SRT;
            else if (!strcmp(buf, "vtt")) out->format = SRV_RF_VTT;
            else rc = srv_bad(e, "response_format", "unsupported_value", "response_format '%s' is not supported (json, text, verbose_json, srt, vtt)", buf);
        }
    }
    if (!rc && (p = srv_multipart_find(parts, n, "temperature"))) {
        char *end;
        if (!(rc = field_text(p, buf, 32, e))) {
            errno = 0;
            double t = strtod(buf, &end);
            if (errno || end == buf || *end || !(t >= 0 && t <= 2))
                rc = srv_bad(e, "temperature", "invalid_value", "temperature must be a number in [0, 2] (got '%s')", buf);
            else out->temperature = (float)t;
        }
    }
    if (!rc && (p = srv_multipart_find(parts, n, "stream"))) {
        if (!(rc = field_text(p, buf, 16, e)) && parse_bool(buf, &out->stream))
            rc = srv_bad(e, "stream", "invalid_value", "stream must be true or false (got '%s')", buf);
    }
    if (!rc && (p = srv_multipart_find(parts, n, "max_tokens"))) {
        char *end;
        if (!(rc = field_text(p, buf, 32, e))) {
            errno = 0;
            long v = strtol(buf, &end, 10);
            if (errno || end == buf || *end || v < 1 || v > (1 << 24))
                rc = srv_bad(e, "max_tokens", "invalid_value", "max_tokens must be a positive integer (got '%s')", buf);
            else out->max_tokens = (int)v;
        }
    }
    if (!rc && (p = srv_multipart_find(parts, n, "chunking_strategy"))) {
        if (!(rc = field_text(p, buf, 1024, e))) {
            const char *v = buf;
            while (*v == ' ') v++;
            if (!strcmp(v, "auto")) out->chunk_seconds = SRV_CHUNK_SECONDS;
            else if (*v == '{')
                rc = srv_bad(e, "chunking_strategy", "unsupported_value",
                             "chunking_strategy objects (server_vad) are not supported: send \"auto\" (pieces of at most %d s "
                             "cut at the quietest moments)", SRV_CHUNK_SECONDS);
            else rc = srv_bad(e, "chunking_strategy", "invalid_value", "chunking_strategy must be \"auto\" (got '%s')", buf);
        }
    }
    /* the repeated fields (OpenAI's SDKs send include[] and timestamp_granularities[]) */
    for (int i = 0; i < n && !rc; i++) {
        const char *name = parts[i].name;
        int inc = !strcmp(name, "include[]") || !strcmp(name, "include");
        int gran = !strcmp(name, "timestamp_granularities[]") || !strcmp(name, "timestamp_granularities");
        if (!inc && !gran) continue;
        if ((rc = field_text(&parts[i], buf, 64, e))) break;
        if (inc && !strcmp(buf, "logprobs")) out->logprobs = 1;
        else if (inc) rc = srv_bad(e, "include[]", "unsupported_value", "include[] '%s' is not supported (logprobs)", buf);
        else if (!strcmp(buf, "word"))
            rc = srv_bad(e, "timestamp_granularities[]", "unsupported_value",
                         "word timestamps are not supported: the model gives none (segment: the pieces of chunking_strategy auto)");
        else if (strcmp(buf, "segment"))
            rc = srv_bad(e, "timestamp_granularities[]", "invalid_value", "timestamp_granularities[] must be segment or word (got '%s')", buf);
        else if (out->format != SRV_RF_VERBOSE_JSON)
            rc = srv_bad(e, "timestamp_granularities[]", "invalid_value", "timestamp_granularities[] needs response_format verbose_json");
    }
    if (!rc && out->logprobs && out->format != SRV_RF_JSON && out->format != SRV_RF_VERBOSE_JSON)
        rc = srv_bad(e, "include[]", "invalid_value", "include[] logprobs needs response_format json or verbose_json");
    if (!rc && (p = srv_multipart_find(parts, n, "prompt"))) {
        if (!(rc = field_text(p, buf, MAX_FIELD, e)) && buf[0]) snprintf(instruction, sizeof instruction, "%s", buf);
    }
    if (!rc && !instruction[0]) {
        if (translate) snprintf(instruction, sizeof instruction, SRV_AST_INSTRUCTION, out->language);
        else snprintf(instruction, sizeof instruction, "%s", SRV_ASR_INSTRUCTION);
    }
    if (!rc) {
        /* The instruction follows the clip, as in the model card; a prompt that places <|audio_1|>
         * itself is used as the whole user turn. */
        char *user = malloc(strlen(instruction) + 16);
        if (!user) rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        else {
            if (srv_has_placeholder(instruction)) strcpy(user, instruction);
            else sprintf(user, "<|audio_1|>%s", instruction);
            pm_chat_msg m = {"user", user, NULL};
            pm_err pe = {0};
            char *rew = NULL;
            if (pm_chat_render(&m, 1, 1, &out->prompt, &pe)) rc = srv_bad(e, "prompt", "invalid_value", "%s", pe.msg);
            else if (pm_prompt_rewrite_placeholders(out->prompt, 0, 1, &rew, &pe))
                rc = srv_bad(e, "prompt", "placeholder_mismatch", "%s (one audio file was sent)", pe.msg);
            free(rew);
            free(user);
        }
    }
    free(buf);
    return rc;
}
