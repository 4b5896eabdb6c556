/* synth_tokenizer.h — a small but valid Hugging Face tokenizer.json for synthetic checkpoints.
 *
 * The real tokenizer (o200k_base + Phi tokens, 6.7 MB) cannot be shipped in the binary, so synth
 * writes a tokenizer of the same kind and JSON shape: byte-level BPE (GPT-2 bytes_to_unicode
 * alphabet), the 256 byte tokens at ids 0..255 in o200k's order, a few hundred merges learned at
 * build time from a short embedded English text (ids 256..), the o200k pre-tokenizer (Split on the
 * o200k regex, Isolated, then ByteLevel without regex), a ByteLevel decoder, and every Phi special
 * token as an added token at its real id (199999, 200010, 200011, 200018..200028). Ids between the
 * learned vocabulary and 199999 have no string (they decode to nothing), as unused ids do in the
 * real file. The JSON keys and nesting are those of the fixture's tokenizer.json. */
#ifndef PM_SYNTH_TOKENIZER_H
#define PM_SYNTH_TOKENIZER_H

#include "util/err.h"

/* Upper bound on learned merges (fewer when the text runs out of pairs seen twice). */
#define PM_SYNTH_TOK_MAX_MERGES 600

/* Builds the tokenizer.json text into *json (malloc'd, the caller frees it) and the number of
 * ordinary tokens (256 + merges; ids 0..*n_ordinary-1) into *n_ordinary. Deterministic. */
int pm_synth_tokenizer_json(char **json, int *n_ordinary, pm_err *e);

#endif
