/* subtitles.c — see subtitles.h. */
#include "subtitles.h"

void srv_subtitles_header(FILE *f, int vtt) {
    if (vtt) fputs("WEBVTT\n\n", f);
}

void srv_subtitles_cue(FILE *f, int vtt, int number, double start, double end, const char *text, size_t len) {
    double at[2] = {start, end};
    if (!vtt) fprintf(f, "%d\n", number);
    for (int k = 0; k < 2; k++) {
        long long ms = (long long)(at[k] * 1000 + 0.5);
        fprintf(f, "%02lld:%02lld:%02lld%c%03lld%s", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, vtt ? '.' : ',', ms % 1000,
                k ? "\n" : " --> ");
    }
    int dashes = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i] == '\n' || text[i] == '\r' ? ' ' : text[i];
        if (ch == '>' && dashes >= 2) fputc(' ', f);
        dashes = ch == '-' ? dashes + 1 : 0;
        fputc(ch, f);
    }
    fputs("\n\n", f);
}
