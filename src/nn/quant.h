/* quant.h — opt-in int8 weights (`--weights q8`).
 *
 * Values: a 2-D weight [out, in] with in % PM_Q8_BLOCK == 0 becomes int8 q plus one fp32 scale per
 * block of PM_Q8_BLOCK consecutive elements of a row: scale = max|w| / 127 over the block,
 * q = round-half-even(w / scale), so w ~ q * scale. 1.125 bytes per weight instead of bf16's 2:
 * decode, which streams every weight once per step, reads 44% fewer bytes. Blocks of 32 (not whole
 * rows) keep one outlier from flattening a whole 3072- or 8192-wide row to a few levels.
 *
 * Layout: rows in groups of PM_Q8_ROWS (the last group zero-padded); per group and per block b, one
 * 144-byte record [4 fp32 scales][row 0's 32 q][row 1's 32 q][row 2's][row 3's], records of a group
 * in block order, groups in row order. The decode kernel's 4-row tile then reads one sequential
 * stream per thread, scales inline, instead of 4 row streams + 4 scale streams; per byte that is
 * what lets the hardware prefetcher keep up with int8's faster consumption.
 *
 * Every consumer dequantizes the same way, (float)q * scale rounded to fp32, then accumulates in
 * fp32 like the bf16 path: the decode kernel (kernels.h, pm_kern_gemv), pm_tensor_read_f32 and the
 * panels the prefill sgemm reads. Only the weights change; activations stay fp32. */
#ifndef PM_QUANT_H
#define PM_QUANT_H

#include <stdint.h>
#include "../io/safetensors.h"
#include "../util/err.h"

#define PM_Q8_BLOCK 32
#define PM_Q8_ROWS 4
#define PM_Q8_RECORD (PM_Q8_ROWS * (4 + PM_Q8_BLOCK)) /* bytes per (group, block) record */

/* 1 when W can be quantized: 2-D bf16/f16/f32 with in % PM_Q8_BLOCK == 0. */
int pm_q8_supported(const pm_tensor *W);

/* dst = the int8 form of src (dst->data malloc'd, name shared with src; dst->nbytes = the packed
 * size). Parallel over row groups. src must satisfy pm_q8_supported. */
int pm_q8_quantize(pm_tensor *dst, const pm_tensor *src, pm_err *e);
void pm_q8_free(pm_tensor *t);

/* Record of (row group g, block b) of a Q8 tensor with nb = in / PM_Q8_BLOCK blocks per row. */
static inline const uint8_t *pm_q8_record(const pm_tensor *t, size_t g, size_t b, size_t nb) {
    return (const uint8_t *)t->data + (g * nb + b) * PM_Q8_RECORD;
}
static inline float pm_q8_scale(const uint8_t *rec, int r) { return ((const float *)rec)[r]; }
static inline const int8_t *pm_q8_quants(const uint8_t *rec, int r) {
    return (const int8_t *)(rec + 4 * PM_Q8_ROWS + (size_t)r * PM_Q8_BLOCK);
}

/* out[i] = dequantized element off + i (row-major [out, in] numbering) of a Q8 tensor. */
void pm_q8_read_f32(const pm_tensor *t, size_t off, size_t count, float *out);

#endif
