/* unicode_delta.h — Unicode 15.0–16.0 additions to the general categories, for PCRE2 builds with older tables.
 *
 * The tokenizer oracle classifies characters with Unicode 16.0; PCRE2 10.42 (Debian 12) knows Unicode 14.0. The
 * pre-tokenizer widens every \p{X} of the split pattern with the ranges listed here (generated data, see
 * gen_unicode_delta.mjs), so letters, marks and numbers added since 14.0 split as the oracle splits them. */
#ifndef PM_TOK_UNICODE_DELTA_H
#define PM_TOK_UNICODE_DELTA_H

#include <stddef.h>
#include <stdint.h>

typedef struct pm_udelta {
    const char *name;           /* short category name: "L", "Lu", "M", "Nd", ... */
    const uint32_t (*ranges)[2]; /* inclusive code point ranges, ascending */
    size_t n;
    int exact;                  /* 0: some code point also LEFT the category since 14.0 (not expressible) */
} pm_udelta;

/* Returns the additions for category `name` (len bytes, e.g. "Lo"), or NULL when the category is not tabulated. */
const pm_udelta *pm_udelta_find(const char *name, size_t len);

#endif
