/* subtitles.h — SubRip (srt) and WebVTT (vtt) cues, written for the transcriptions route's
 * response_format srt / vtt and `phi4mm transcribe --srt / --vtt`: a cue a segment (the clip whole,
 * or each long-form piece) with its start and end. */
#ifndef PM_SRV_SUBTITLES_H
#define PM_SRV_SUBTITLES_H

#include <stddef.h>
#include <stdio.h>

/* The header a file of the format starts with ("WEBVTT" and a blank line; none for srt). */
void srv_subtitles_header(FILE *f, int vtt);

/* One cue: its number (srt only, from 1), the times as HH:MM:SS,mmm (srt) or HH:MM:SS.mmm (vtt),
 * then the text (len bytes) on one line: line breaks become spaces (a blank line would end the
 * cue) and "-->" becomes "-- >" (it would read as a timing line); a blank line after it. */
void srv_subtitles_cue(FILE *f, int vtt, int number, double start, double end, const char *text, size_t len);

#endif
