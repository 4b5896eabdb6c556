/* audio_form.h — the multipart fields of /v1/audio/transcriptions and /v1/audio/translations to a
 * Phi-4-multimodal request. The model does both tasks itself, prompted as the model card shows:
 *   ASR: <|user|><|audio_1|>Transcribe the audio clip into text.<|end|><|assistant|>
 *   AST: <|user|><|audio_1|>Translate the audio to {language}.<|end|><|assistant|>
 * Fields: file (required), model (ignored: one model is served), prompt (replaces the task
 * instruction), language (translations: the target, default English; transcriptions: recorded
 * only), response_format json|text|verbose_json|srt|vtt (a cue a segment), temperature, stream, chunking_strategy "auto"
 * (long-form: the clip in pieces of at most SRV_CHUNK_SECONDS, one request each, cut at its
 * quietest moments by pm_audio_split; server_vad objects are refused), include[] logprobs (each
 * generated token's log-probability, json and verbose_json), timestamp_granularities[] segment
 * (verbose_json; word is refused: the model gives no timestamps), and the extension max_tokens.
 * Pure: no engine. */
#ifndef PM_SRV_AUDIO_FORM_H
#define PM_SRV_AUDIO_FORM_H

#include <stddef.h>
#include <stdint.h>

#include "multipart.h"
#include "server.h"

#define SRV_ASR_INSTRUCTION "Transcribe the audio clip into text."
#define SRV_AST_INSTRUCTION "Translate the audio to %s."
#define SRV_CHUNK_SECONDS 30 /* chunking_strategy auto: under the model card's 40 s for the best recognition */

typedef enum { SRV_RF_JSON = 0, SRV_RF_TEXT = 1, SRV_RF_VERBOSE_JSON = 2, SRV_RF_SRT = 3, SRV_RF_VTT = 4 } srv_resp_format;

typedef struct srv_audio_req {
    int translate;
    const uint8_t *file;       /* into the body */
    size_t file_len;
    char filename[256];
    char *prompt;              /* malloc'd full chat prompt */
    srv_resp_format format;
    float temperature;
    int stream;
    int max_tokens;            /* 0: not given */
    double chunk_seconds;      /* chunking_strategy auto: SRV_CHUNK_SECONDS; 0: the clip whole */
    int logprobs;              /* include[] logprobs */
    char language[48];         /* English name ("French"), "" when not given for transcriptions */
} srv_audio_req;

/* Validates the parts and fills out. Returns 0, or -1 with a 400 in e. Free with srv_audio_req_free. */
int srv_audio_parse(const srv_part *parts, int n, int translate, srv_audio_req *out, srv_error *e);
/* The form's fields srv_audio_parse does not read: how many, named in out (srv_field_note). */
int srv_audio_ignored(const srv_part *parts, int n, char *out, size_t cap);
void srv_audio_req_free(srv_audio_req *r);

/* Maps an ISO 639-1 code or a language name to its English name ("fr" -> "French"). Returns 0, or
 * -1 when the value is neither a known code nor a plain alphabetic name. */
int srv_language_name(const char *in, char *out, size_t cap);

#endif
