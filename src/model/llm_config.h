/* llm_config.h — the Phi-4-mini decoder's numbers, read and validated from config.json (+
 * generation_config.json for the stop ids). Nothing in the engine assumes particular dims. */
#ifndef PM_LLM_CONFIG_H
#define PM_LLM_CONFIG_H

#include <jansson.h>
#include "util/err.h"
#include "phi4mm.h"

#define PM_MAX_ROPE_FACTORS 512
#define PM_MAX_EOS 8

typedef struct pm_llm_config {
    int vocab, hidden, n_layers, n_heads, n_kv_heads, head_dim, intermediate;
    int rot_dims;                 /* head_dim * partial_rotary_factor (even) */
    float rms_eps, rope_theta;
    int max_pos, orig_max_pos;    /* LongRoPE switch happens when a sequence exceeds orig_max_pos */
    int n_factors;                /* rot_dims / 2 */
    float short_factor[PM_MAX_ROPE_FACTORS], long_factor[PM_MAX_ROPE_FACTORS];
    float rope_scale;             /* sqrt(1 + ln(max/orig) / ln(orig)), 1 when max <= orig */
    int lora_r[3];                /* by pm_adapter; [0] unused */
    float lora_alpha[3];
    int eos_ids[PM_MAX_EOS], n_eos;
} pm_llm_config;

/* Parses the decoder fields of config.json (`root`); `gen` (generation_config.json) may be NULL,
 * then eos ids default to [200020, 199999]. Every error names the field. */
int pm_llm_config_parse(const json_t *root, const json_t *gen, pm_llm_config *c, pm_err *e);

/* Helpers for other config readers: fetch a required integer / number field with a range check. */
int pm_json_int(const json_t *obj, const char *key, long long lo, long long hi, int *out, const char *where, pm_err *e);
int pm_json_num(const json_t *obj, const char *key, double lo, double hi, double *out, const char *where, pm_err *e);

#endif
