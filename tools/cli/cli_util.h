/* cli_util.h — small helpers shared by the CLI subcommands. */
#ifndef PM_CLI_UTIL_H
#define PM_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include "phi4mm.h"

/* Prints "phi4mm <cmd>: error: <msg>" to stderr and returns 1 (the exit status). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reads a whole file; NULL (+ message in err) on failure. */
void *cli_read_file(const char *path, size_t *len, char *err, size_t errlen);
/* The same, where "-" is standard input read to its end (a pipe: `ffmpeg ... -f wav - | phi4mm
 * transcribe -`); read once, it is empty after. */
void *cli_read_input(const char *path, size_t *len, char *err, size_t errlen);
/* The prompt of -p TEXT or of -f FILE ("-": standard input; the file's final line endings dropped, as
 * `-p "$(cat FILE)"` gives it): one of the two, UTF-8 text without NUL. *text points at prompt or at
 * *owned (malloc'd: the caller frees it, NULL otherwise). cli_fail's status on an error. */
int cli_prompt_arg(const char *cmd, const char *prompt, const char *file, const char **text, char **owned);
/* 0 when s is NULL or UTF-8 text, else cli_fail's status naming it and the first bad byte: the model
 * reads UTF-8, and other bytes (a terminal in another encoding) would reach it as stray bytes. */
int cli_utf8_text(const char *cmd, const char *name, const char *s);
/* Parses an int / float option value with range check; returns 0 on success. */
int cli_int(const char *s, long lo, long hi, long *out);
int cli_float(const char *s, double lo, double hi, double *out);
double cli_now(void);
/* Parses --weights VALUE ("bf16" | "q8") into o; returns cli_fail's status on anything else. */
int cli_weights(const char *cmd, const char *v, pm_load_options *o);
/* Parses a byte size: digits with an optional K / M / G suffix (binary), > 0 and <= 1 TiB. */
int cli_size(const char *s, size_t *out);
/* Parses --kv-budget VALUE ("auto" = 0, "none" = -1, or a size) into *out; cli_fail's status on
 * anything else. */
int cli_kv_budget(const char *cmd, const char *v, int64_t *out);
/* --kv-cache f32|bf16 -> pm_engine_opts.kv_bf16 */
int cli_kv_cache(const char *cmd, const char *v, int *bf16);
/* --compute f32|bf16 -> pm_load_options.compute_bf16 (as cli_kv_cache) */
int cli_compute(const char *cmd, const char *v, int *bf16);
/* --draft N (0..PM_MAX_DRAFT) -> pm_engine_opts.draft_tokens */
int cli_draft(const char *cmd, const char *v, int *draft_tokens);
/* After a load with o: says on stderr that --compute bf16 had no effect (no AVX512-BF16), if so. */
void cli_compute_note(const char *cmd, const pm_load_options *o, const pm_model *m);

#endif
