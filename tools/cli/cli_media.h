/* cli_media.h — the media files a CLI request names: decoded in order, with the request's limits
 * (generate, transcribe, chat). */
#ifndef PM_CLI_MEDIA_H
#define PM_CLI_MEDIA_H

#include "phi4mm.h"

#define CLI_MAX_MEDIA 64

typedef struct cli_media {
    pm_audio_in audio[CLI_MAX_MEDIA];
    pm_image_in image[CLI_MAX_MEDIA];
    int n_audio, n_image;
} cli_media;

void cli_media_free(cli_media *ms);
/* Decodes a clip into the set, stopping once its clips run over max_seconds in all (<= 0: no
 * limit): a small compressed file can decode to many GB. cli_fail's status on an error. */
int cli_load_audio(const char *cmd, cli_media *ms, const char *path, double max_seconds);
/* Decodes an image into the set (the default pixel limit). cli_fail's status on an error. */
int cli_load_image(const char *cmd, cli_media *ms, const char *path);
/* The user message for prompt with ms's media: a prompt without <|image_N|> (<|audio_N|>)
 * placeholders gets them prepended in order, images then clips, with a note on stderr; malloc'd
 * (NULL when memory runs out). */
char *cli_media_prompt(const cli_media *ms, const char *prompt);
/* The request's media: ms's images and clips, in order (ms outlives the request). */
void cli_media_attach(const cli_media *ms, pm_request *req);

#endif
