/* siglip.c — see siglip.h.
 *
 * Layout: crops are processed in chunks of up to CHUNK_ROWS patch rows so that the projections
 * are single big sgemm calls (pm_linear) while the activations stay small (real dims: 4 crops =
 * 4096 rows, ~70 MB for the MLP activations). Attention runs per (crop, head) pair, OpenMP
 * across pairs, each pair fused (pm_kern_flash: tiles of scores, online softmax) where the CPU
 * has its SIMD path, else on contiguous copies of its head slices with fp32 sgemm
 * (pm_matmul_nt / pm_matmul_nn) and a [P, P] score matrix (4 MB at P = 1024) per thread.
 *
 * Faithfulness notes (official `vision_siglip_navit.py`, eager attention path):
 * - padded keys get `finfo(float32).min` added to their scaled scores (not -inf), so a crop with
 *   no valid patch at all would attend uniformly, as the official code does; padded queries are
 *   computed like any other (their outputs reach the fixture's layer dumps);
 * - position ids come from torch.arange / torch.bucketize, reproduced in the same float/double
 *   arithmetic (pos_buckets below);
 * - the MLP activation is the tanh GELU, as x * sigmoid(2u) (the same function, one exp). */
#include "siglip.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "nn/kernels.h"
#include "nn/ops.h"

#define PFX "model.embed_tokens_extend.image_embed.img_processor."
#define CHUNK_ROWS 4096

typedef struct siglip_layer {
    const pm_tensor *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;
    const pm_tensor *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b; /* fp32 copies */
} siglip_layer;

struct pm_siglip {
    pm_siglip_config c;
    int grid, npatch, head_dim, n_run; /* n_run: layers actually computed */
    pm_tensor patch_w2d;               /* patch_embedding.weight viewed as [D, C*P*P] */
    const pm_tensor *patch_b;
    float *pos;                        /* [npatch, D] fp32 */
    siglip_layer *layers;              /* only the first n_run are filled for compute */
};

/* ---------------------------------------------------------------- config */

static int json_int_field(const json_t *o, const char *key, int def, int lo, int hi, int *out, pm_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v) {
        if (def < lo) return pm_errf(e, PM_EFORMAT, "config.json: _oracle_siglip_vision_config.%s is missing", key);
        *out = def;
        return PM_OK;
    }
    if (!json_is_integer(v)) return pm_errf(e, PM_EFORMAT, "config.json: _oracle_siglip_vision_config.%s must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return pm_errf(e, PM_EFORMAT, "config.json: _oracle_siglip_vision_config.%s = %lld is out of range [%d, %d]", key, (long long)x,
                       lo, hi);
    *out = (int)x;
    return PM_OK;
}

static int parse_act(const char *s, pm_siglip_act *out, pm_err *e) {
    if (!strcmp(s, "gelu_pytorch_tanh") || !strcmp(s, "gelu_new")) *out = PM_SIGLIP_ACT_GELU_TANH;
    else if (!strcmp(s, "gelu")) *out = PM_SIGLIP_ACT_GELU_ERF;
    else return pm_errf(e, PM_EUNSUPPORTED, "config.json: SigLIP hidden_act \"%s\" is not supported (gelu_pytorch_tanh, gelu_new, gelu)", s);
    return PM_OK;
}

int pm_siglip_config_from_json(const json_t *root, pm_siglip_config *c, pm_err *e) {
    memset(c, 0, sizeof *c);
    /* The so400m dims of get_siglip_vision_model() and SiglipVisionConfig's defaults. */
    c->hidden = 1152;
    c->intermediate = 4304;
    c->heads = 16;
    c->layers = 27;
    c->image_size = 448;
    c->patch_size = 14;
    c->channels = 3;
    c->ln_eps = 1e-6f;
    c->act = PM_SIGLIP_ACT_GELU_TANH;
    c->layer_idx = -2;
    if (!json_is_object(root)) return pm_errf(e, PM_EFORMAT, "config.json: the root is not an object");

    const json_t *o = json_object_get(root, "_oracle_siglip_vision_config");
    if (o) {
        if (!json_is_object(o)) return pm_errf(e, PM_EFORMAT, "config.json: _oracle_siglip_vision_config must be an object");
        int rc;
        if ((rc = json_int_field(o, "hidden_size", -1, 1, 1 << 16, &c->hidden, e))) return rc;
        if ((rc = json_int_field(o, "intermediate_size", -1, 1, 1 << 20, &c->intermediate, e))) return rc;
        if ((rc = json_int_field(o, "num_attention_heads", -1, 1, 1024, &c->heads, e))) return rc;
        if ((rc = json_int_field(o, "num_hidden_layers", -1, 1, 1024, &c->layers, e))) return rc;
        if ((rc = json_int_field(o, "image_size", 448, 1, 1 << 14, &c->image_size, e))) return rc;
        if ((rc = json_int_field(o, "patch_size", 14, 1, 1 << 10, &c->patch_size, e))) return rc;
        if ((rc = json_int_field(o, "num_channels", 3, 1, 16, &c->channels, e))) return rc;
        json_t *v = json_object_get(o, "layer_norm_eps");
        if (v) {
            if (!json_is_number(v) || !(json_number_value(v) > 0 && json_number_value(v) < 1))
                return pm_errf(e, PM_EFORMAT, "config.json: _oracle_siglip_vision_config.layer_norm_eps must be a number in (0, 1)");
            c->ln_eps = (float)json_number_value(v);
        }
        v = json_object_get(o, "hidden_act");
        if (v) {
            if (!json_is_string(v)) return pm_errf(e, PM_EFORMAT, "config.json: _oracle_siglip_vision_config.hidden_act must be a string");
            if ((rc = parse_act(json_string_value(v), &c->act, e))) return rc;
        }
    }
    const json_t *ip = json_object_get(root, "img_processor");
    if (json_is_object(ip)) {
        json_t *li = json_object_get(ip, "layer_idx");
        if (li) {
            if (!json_is_integer(li)) return pm_errf(e, PM_EFORMAT, "config.json: img_processor.layer_idx must be an integer");
            c->layer_idx = (int)json_integer_value(li);
        }
        json_t *tf = json_object_get(ip, "type_feature");
        if (tf && (!json_is_string(tf) || strcmp(json_string_value(tf), "patch")))
            return pm_errf(e, PM_EUNSUPPORTED, "config.json: img_processor.type_feature must be \"patch\" (the only kind Phi-4 uses)");
    }
    if (c->hidden % c->heads)
        return pm_errf(e, PM_EFORMAT, "config.json: SigLIP hidden_size %d is not divisible by num_attention_heads %d", c->hidden, c->heads);
    if (c->image_size % c->patch_size)
        return pm_errf(e, PM_EFORMAT, "config.json: SigLIP image_size %d is not a multiple of patch_size %d", c->image_size, c->patch_size);
    if (c->layer_idx < -(c->layers + 1) || c->layer_idx > c->layers)
        return pm_errf(e, PM_EFORMAT, "config.json: img_processor.layer_idx %d is outside the %d hidden states of a %d-layer SigLIP",
                       c->layer_idx, c->layers + 1, c->layers);
    return PM_OK;
}

/* ---------------------------------------------------------------- load */

static float *copy_vec(pm_weights *w, pm_err *e, int n, const char *fmt, int i) {
    const pm_tensor *t = pm_wget(w, e, 1, (int64_t[]){n}, fmt, i);
    return t ? pm_tensor_f32_copy(t, e) : NULL;
}

int pm_siglip_load(pm_siglip **out, pm_weights *w, const pm_siglip_config *c, pm_err *e) {
    *out = NULL;
    pm_siglip *m = pm_calloc(1, sizeof *m, e);
    if (!m) return e->code;
    m->c = *c;
    const int D = c->hidden, I = c->intermediate;
    m->grid = c->image_size / c->patch_size;
    m->npatch = m->grid * m->grid;
    m->head_dim = D / c->heads;
    m->n_run = c->layer_idx < 0 ? c->layers + 1 + c->layer_idx : c->layer_idx;

    const pm_tensor *pw = pm_wget(w, e, 4, (int64_t[]){D, c->channels, c->patch_size, c->patch_size},
                                  PFX "embeddings.patch_embedding.weight");
    m->patch_b = pm_wget(w, e, 1, (int64_t[]){D}, PFX "embeddings.patch_embedding.bias");
    const pm_tensor *pe = pm_wget(w, e, 2, (int64_t[]){m->npatch, D}, PFX "embeddings.position_embedding.weight");
    if (e->code) goto fail;
    m->patch_w2d = *pw;
    m->patch_w2d.ndim = 2;
    m->patch_w2d.shape[0] = D;
    m->patch_w2d.shape[1] = (int64_t)c->channels * c->patch_size * c->patch_size;
    m->pos = pm_tensor_f32_copy(pe, e);
    m->layers = pm_calloc((size_t)c->layers, sizeof *m->layers, e);
    if (e->code) goto fail;

    for (int i = 0; i < c->layers; i++) {
        siglip_layer *L = &m->layers[i];
        const int64_t dd[2] = {D, D}, id[2] = {I, D}, di[2] = {D, I}, d1[1] = {D}, i1[1] = {I};
        L->q_w = pm_wget(w, e, 2, dd, PFX "encoder.layers.%d.self_attn.q_proj.weight", i);
        L->q_b = pm_wget(w, e, 1, d1, PFX "encoder.layers.%d.self_attn.q_proj.bias", i);
        L->k_w = pm_wget(w, e, 2, dd, PFX "encoder.layers.%d.self_attn.k_proj.weight", i);
        L->k_b = pm_wget(w, e, 1, d1, PFX "encoder.layers.%d.self_attn.k_proj.bias", i);
        L->v_w = pm_wget(w, e, 2, dd, PFX "encoder.layers.%d.self_attn.v_proj.weight", i);
        L->v_b = pm_wget(w, e, 1, d1, PFX "encoder.layers.%d.self_attn.v_proj.bias", i);
        L->o_w = pm_wget(w, e, 2, dd, PFX "encoder.layers.%d.self_attn.out_proj.weight", i);
        L->o_b = pm_wget(w, e, 1, d1, PFX "encoder.layers.%d.self_attn.out_proj.bias", i);
        L->fc1_w = pm_wget(w, e, 2, id, PFX "encoder.layers.%d.mlp.fc1.weight", i);
        L->fc1_b = pm_wget(w, e, 1, i1, PFX "encoder.layers.%d.mlp.fc1.bias", i);
        L->fc2_w = pm_wget(w, e, 2, di, PFX "encoder.layers.%d.mlp.fc2.weight", i);
        L->fc2_b = pm_wget(w, e, 1, d1, PFX "encoder.layers.%d.mlp.fc2.bias", i);
        if (i < m->n_run) { /* layers past the feature layer are only shape-checked */
            L->ln1_w = copy_vec(w, e, D, PFX "encoder.layers.%d.layer_norm1.weight", i);
            L->ln1_b = copy_vec(w, e, D, PFX "encoder.layers.%d.layer_norm1.bias", i);
            L->ln2_w = copy_vec(w, e, D, PFX "encoder.layers.%d.layer_norm2.weight", i);
            L->ln2_b = copy_vec(w, e, D, PFX "encoder.layers.%d.layer_norm2.bias", i);
        } else {
            pm_wget(w, e, 1, d1, PFX "encoder.layers.%d.layer_norm1.weight", i);
            pm_wget(w, e, 1, d1, PFX "encoder.layers.%d.layer_norm1.bias", i);
            pm_wget(w, e, 1, d1, PFX "encoder.layers.%d.layer_norm2.weight", i);
            pm_wget(w, e, 1, d1, PFX "encoder.layers.%d.layer_norm2.bias", i);
        }
        if (e->code) goto fail;
    }
    /* Unused by the features (hidden_states[-2]) but part of the checkpoint. */
    pm_wget(w, e, 1, (int64_t[]){D}, PFX "post_layernorm.weight");
    pm_wget(w, e, 1, (int64_t[]){D}, PFX "post_layernorm.bias");
    pm_wget(w, e, 3, (int64_t[]){1, 1, D}, PFX "head.probe");
    pm_wget(w, e, 2, (int64_t[]){3 * (int64_t)D, D}, PFX "head.attention.in_proj_weight");
    pm_wget(w, e, 1, (int64_t[]){3 * (int64_t)D}, PFX "head.attention.in_proj_bias");
    pm_wget(w, e, 2, (int64_t[]){D, D}, PFX "head.attention.out_proj.weight");
    pm_wget(w, e, 1, (int64_t[]){D}, PFX "head.attention.out_proj.bias");
    pm_wget(w, e, 1, (int64_t[]){D}, PFX "head.layernorm.weight");
    pm_wget(w, e, 1, (int64_t[]){D}, PFX "head.layernorm.bias");
    pm_wget(w, e, 2, (int64_t[]){I, D}, PFX "head.mlp.fc1.weight");
    pm_wget(w, e, 1, (int64_t[]){I}, PFX "head.mlp.fc1.bias");
    pm_wget(w, e, 2, (int64_t[]){D, I}, PFX "head.mlp.fc2.weight");
    pm_wget(w, e, 1, (int64_t[]){D}, PFX "head.mlp.fc2.bias");
    if (e->code) goto fail;
    *out = m;
    return PM_OK;
fail:
    pm_siglip_free(m);
    return e->code ? e->code : PM_ESTATE;
}

void pm_siglip_free(pm_siglip *m) {
    if (!m) return;
    if (m->layers)
        for (int i = 0; i < m->c.layers; i++) {
            free(m->layers[i].ln1_w);
            free(m->layers[i].ln1_b);
            free(m->layers[i].ln2_w);
            free(m->layers[i].ln2_b);
        }
    free(m->layers);
    free(m->pos);
    free(m);
}

const pm_siglip_config *pm_siglip_get_config(const pm_siglip *m) { return &m->c; }
int pm_siglip_grid(const pm_siglip *m) { return m->grid; }

/* ---------------------------------------------------------------- position ids */

/* torch.arange(start, end, step) on float32 output: n = ceil((end - start) / step) in double,
 * element i = (float)(start + i * step) with double accumulation. Writes at most cap values. */
static int arange_f32(double start, double end, double step, float *out, int cap) {
    double nd = ceil((end - start) / step);
    int n = nd > 0 ? (nd > cap ? cap : (int)nd) : 0;
    for (int i = 0; i < n; i++) out[i] = (float)(start + (double)i * step);
    return n;
}

/* torch.bucketize(x, boundaries, right=True): the number of boundaries <= x. */
static int bucket_right(float x, const float *b, int nb) {
    int k = 0;
    while (k < nb && b[k] <= x) k++;
    return k;
}

/* Bucket of each of the n fractional coordinates arange(0, 1 - 1e-6, 1/n) (n = valid patches
 * along one side); returns how many coordinates arange produced (n for any sane n). */
static int pos_buckets(int grid, int n, const float *bnd, int nbnd, int *out) {
    float step = 1.0f / (float)n; /* 1 / int64 tensor: float32 true division */
    float *fc = malloc(sizeof(float) * (size_t)(grid + 1));
    if (!fc) return -1;
    int cnt = arange_f32(0.0, 1.0 - 1e-6, (double)step, fc, grid + 1);
    for (int i = 0; i < cnt; i++) out[i] = bucket_right(fc[i], bnd, nbnd);
    free(fc);
    return cnt;
}

int pm_siglip_position_ids(int grid, const float *mask, int *ids, pm_err *e) {
    const int np = grid * grid;
    int nb_h = 0, nb_w = 0, total = 0;
    for (int r = 0; r < grid; r++) nb_h += mask[(size_t)r * grid] != 0.0f;
    for (int c = 0; c < grid; c++) nb_w += mask[c] != 0.0f;
    for (int p = 0; p < np; p++) total += mask[p] != 0.0f;
    memset(ids, 0, sizeof(int) * (size_t)np);
    if (total == 0) return PM_OK; /* nothing to assign (all positions stay 0, as in the official code) */
    if (total != nb_h * nb_w)
        return pm_errf(e, PM_EINVAL,
                       "image patch mask: %d valid patches but its first column has %d and first row %d (%d x %d expected): "
                       "the valid region must be a rectangle at the top-left of the crop",
                       total, nb_h, nb_w, nb_h, nb_w);
    float *bnd = malloc(sizeof(float) * (size_t)(grid + 1));
    int *bh = malloc(sizeof(int) * (size_t)(grid + 1)), *bw = malloc(sizeof(int) * (size_t)(grid + 1));
    if (!bnd || !bh || !bw) {
        free(bnd); free(bh); free(bw);
        return pm_errf(e, PM_ENOMEM, "image patch mask: out of memory");
    }
    int nbnd = arange_f32(1.0 / grid, 1.0, 1.0 / grid, bnd, grid + 1);
    int ch = pos_buckets(grid, nb_h, bnd, nbnd, bh), cw = pos_buckets(grid, nb_w, bnd, nbnd, bw);
    int rc = PM_OK;
    if (ch < 0 || cw < 0) {
        rc = pm_errf(e, PM_ENOMEM, "image patch mask: out of memory");
    } else if (ch != nb_h || cw != nb_w) {
        rc = pm_errf(e, PM_ESTATE, "image patch mask: fractional coordinates of %d x %d patches came out %d x %d", nb_h, nb_w, ch, cw);
    } else {
        int k = 0;
        for (int p = 0; p < np; p++) /* row-major over valid patches, as boolean-mask assignment does */
            if (mask[p] != 0.0f) {
                ids[p] = bh[k / nb_w] * grid + bw[k % nb_w];
                k++;
            }
    }
    free(bnd); free(bh); free(bw);
    return rc;
}

/* ---------------------------------------------------------------- forward */

/* Elementwise kernels of the attention softmax and the MLP activation. They dominate after the
 * GEMMs (16M exps per crop-layer each at real dims), so they use a polynomial exp (Cephes expf,
 * ~1 ulp) in loops the compiler vectorises, compiled three times: AVX-512, AVX2+FMA and portable,
 * picked at run time like nn/kernels.c does. */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* out[0..16) = exp(in[0..16)); inputs clamped to [-88.376, 88] (results below ~2^-126 flush to 0,
 * the top stays finite). Vectors pass through memory so no vector type crosses a function
 * boundary (no ABI dependence). Each lane's operations are the same whatever vector width the
 * clone compiles them to (no FP contraction under -std=c11), so every clone gives the same exps. */
static inline __attribute__((always_inline)) void exp16(const float *in, float *out) {
    v16f x;
    memcpy(&x, in, sizeof x);
    const v16f hi = (v16f){0} + 88.0f, lo = (v16f){0} - 88.3762626647949f;
    v16i m = x > hi;
    x = (v16f)(((v16i)x & ~m) | ((v16i)hi & m));
    m = x < lo;
    x = (v16f)(((v16i)x & ~m) | ((v16i)lo & m));
    v16f fx = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    x = x - fx * 0.693359375f;
    x = x - fx * -2.12194440e-4f;
    v16f z = x * x;
    v16f y = x * 1.9875691500e-4f + 1.3981999507e-3f;
    y = y * x + 8.3334519073e-3f;
    y = y * x + 4.1665795894e-2f;
    y = y * x + 1.6666665459e-1f;
    y = y * x + 5.0000001201e-1f;
    y = y * z + x + 1.0f;
    v16i n = __builtin_convertvector(fx, v16i);
    typedef uint32_t v16u __attribute__((vector_size(64)));
    v16i bits = (v16i)((v16u)(n + 127) << 23); /* 2^n; n = -128 (x = -88.38) is flushed to a 0 factor */
    m = n > -127;
    bits &= m;
    y = y * (v16f)bits;
    memcpy(out, &y, sizeof y);
}

/* row[j] = softmax_j(row * scale + madd) with madd[j] in {0, -FLT_MAX} or madd == NULL. */
static inline __attribute__((always_inline)) void softmax_row_body(float *row, int n, float scale, const float *madd) {
    float m = -INFINITY, sum = 0.0f;
    if (madd) {
#pragma omp simd reduction(max : m)
        for (int j = 0; j < n; j++) {
            float v = row[j] * scale + madd[j];
            row[j] = v;
            m = v > m ? v : m;
        }
    } else {
#pragma omp simd reduction(max : m)
        for (int j = 0; j < n; j++) {
            float v = row[j] * scale;
            row[j] = v;
            m = v > m ? v : m;
        }
    }
#pragma omp simd
    for (int j = 0; j < n; j++) row[j] -= m;
    int j16 = n & ~15;
    for (int j = 0; j < j16; j += 16) exp16(row + j, row + j);
    if (j16 < n) {
        float t[16];
        for (int i = 0; i < 16; i++) t[i] = j16 + i < n ? row[j16 + i] : 0.0f;
        exp16(t, t);
        for (int i = 0; j16 + i < n; i++) row[j16 + i] = t[i];
    }
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) sum += row[j];
    float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < n; j++) row[j] *= inv;
}

/* In place: x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) — identical to PyTorch's
 * 0.5 x (1 + tanh(u)) ("gelu_pytorch_tanh") up to float rounding. */
static inline __attribute__((always_inline)) void gelu_tanh_body(float *x, size_t n) {
    enum { B = 256 };
    float t[B];
    for (size_t j0 = 0; j0 < n; j0 += B) {
        size_t k = n - j0 < B ? n - j0 : B;
        float *v = x + j0;
#pragma omp simd
        for (size_t i = 0; i < k; i++) t[i] = -2.0f * (0.7978845608028654f * (v[i] + 0.044715f * (v[i] * v[i] * v[i])));
        for (size_t i = k; i < ((k + 15) & ~(size_t)15); i++) t[i] = 0.0f;
        for (size_t i = 0; i < k; i += 16) exp16(t + i, t + i);
#pragma omp simd
        for (size_t i = 0; i < k; i++) v[i] = v[i] / (1.0f + t[i]);
    }
}

static void softmax_row_c(float *row, int n, float scale, const float *madd) { softmax_row_body(row, n, scale, madd); }
static void gelu_tanh_c(float *x, size_t n) { gelu_tanh_body(x, n); }
#if defined(__GNUC__) && defined(__x86_64__)
#define AVX512_CLONE __attribute__((target("avx512f,avx512bw,avx2,fma")))
#define AVX2_CLONE __attribute__((target("avx2,fma")))
AVX512_CLONE static void softmax_row_avx512(float *row, int n, float scale, const float *madd) { softmax_row_body(row, n, scale, madd); }
AVX512_CLONE static void gelu_tanh_avx512(float *x, size_t n) { gelu_tanh_body(x, n); }
AVX2_CLONE static void softmax_row_avx2(float *row, int n, float scale, const float *madd) { softmax_row_body(row, n, scale, madd); }
AVX2_CLONE static void gelu_tanh_avx2(float *x, size_t n) { gelu_tanh_body(x, n); }
#define HAVE_SIMD_CLONES 1
#endif

static void softmax_row(float *row, int n, float scale, const float *madd) {
#ifdef HAVE_SIMD_CLONES
    if (pm_kern_have_avx512()) {
        softmax_row_avx512(row, n, scale, madd);
        return;
    }
    if (pm_kern_have_avx2()) {
        softmax_row_avx2(row, n, scale, madd);
        return;
    }
#endif
    softmax_row_c(row, n, scale, madd);
}

static void gelu_tanh_inplace(float *x, size_t n) {
#ifdef HAVE_SIMD_CLONES
    if (pm_kern_have_avx512()) {
        gelu_tanh_avx512(x, n);
        return;
    }
    if (pm_kern_have_avx2()) {
        gelu_tanh_avx2(x, n);
        return;
    }
#endif
    gelu_tanh_c(x, n);
}

/* Patch embedding for g crops: x[g*np, D] = im2col(pixels) @ W^T + b, + position rows. */
static int embed_crops(const pm_siglip *m, const float *pixels, const float *mask, int g, float *x, pm_err *e) {
    const pm_siglip_config *c = &m->c;
    const int P = c->patch_size, S = c->image_size, C = c->channels, G = m->grid, np = m->npatch, D = c->hidden;
    const int K = C * P * P;
    const size_t N = (size_t)g * np;
    float *cols = pm_malloc(N * K * sizeof(float), e);
    int *ids = pm_malloc((size_t)np * sizeof(int), e);
    if (!cols || !ids) {
        free(cols); free(ids);
        return e->code;
    }
#pragma omp parallel for schedule(static)
    for (long long pi = 0; pi < (long long)N; pi++) {
        int crop = (int)(pi / np), p = (int)(pi % np), py = p / G, px = p % G;
        const float *img = pixels + (size_t)crop * C * S * S;
        float *dst = cols + (size_t)pi * K;
        for (int ch = 0; ch < C; ch++)
            for (int ky = 0; ky < P; ky++) {
                const float *src = img + ((size_t)ch * S + (size_t)py * P + ky) * S + (size_t)px * P;
                memcpy(dst + ((size_t)ch * P + ky) * P, src, sizeof(float) * P);
            }
    }
    pm_linear(x, cols, (int)N, &m->patch_w2d, m->patch_b);
    free(cols);
    int rc = PM_OK;
    for (int crop = 0; crop < g && !rc; crop++) {
        rc = pm_siglip_position_ids(G, mask + (size_t)crop * np, ids, e);
        if (rc) {
            pm_err_ctx(e, "crop %d: ", crop);
            break;
        }
        for (int p = 0; p < np; p++) {
            float *xr = x + ((size_t)crop * np + p) * D;
            const float *pr = m->pos + (size_t)ids[p] * D;
            for (int d = 0; d < D; d++) xr[d] += pr[d];
        }
    }
    free(ids);
    return rc;
}

/* Multi-head attention of g crops: out[g*np, D] from q, k, v [g*np, D]; mask per crop. */
static int attention(const pm_siglip *m, const float *q, const float *k, const float *v, const float *mask, int g, float *out,
                     pm_err *e) {
    const int np = m->npatch, D = m->c.hidden, H = m->c.heads, hd = m->head_dim;
    const float scale = 1.0f / sqrtf((float)hd);
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    const int fused = pm_kern_flash_takes();
    const size_t per = fused ? (pm_kern_flash_ws(np, hd) + 15) / 16 * 16 : (size_t)4 * np * hd + (size_t)np * np;
    float *ws = pm_malloc(per * nthreads * sizeof(float), e);
    if (!ws) return e->code;
    /* additive key mask per crop (0 valid, -FLT_MAX padded, as _prepare_4d_attention_mask); a
     * crop without padding gets none (the official code passes no mask then) */
    float *madd = malloc(sizeof(float) * (size_t)g * np);
    unsigned char *anypad = calloc((size_t)g, 1);
    if (!anypad || !madd) {
        free(ws); free(anypad); free(madd);
        return pm_errf(e, PM_ENOMEM, "SigLIP attention: out of memory");
    }
    for (int c = 0; c < g; c++)
        for (int p = 0; p < np; p++) {
            int pad = mask[(size_t)c * np + p] == 0.0f;
            madd[(size_t)c * np + p] = pad ? -FLT_MAX : 0.0f;
            anypad[c] |= (unsigned char)pad;
        }

#pragma omp parallel for schedule(dynamic, 1)
    for (int pair = 0; pair < g * H; pair++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        int crop = pair / H, h = pair % H;
        const size_t base = (size_t)crop * np * D + (size_t)h * hd;
        const float *mk = anypad[crop] ? madd + (size_t)crop * np : NULL;
        if (fused) {
            pm_flash a = {.o = out + base, .q = q + base, .k = k + base, .v = v + base, .mask = mk, .ldo = (size_t)D, .ldq = (size_t)D,
                          .ldk = (size_t)D, .ldv = (size_t)D, .nq = np, .nk = np, .hd = hd, .scale = scale};
            pm_kern_flash(&a, ws + per * tid);
            continue;
        }
        float *qh = ws + per * tid, *kh = qh + (size_t)np * hd, *vh = kh + (size_t)np * hd, *oh = vh + (size_t)np * hd;
        float *s = oh + (size_t)np * hd;
        for (int i = 0; i < np; i++) {
            memcpy(qh + (size_t)i * hd, q + base + (size_t)i * D, sizeof(float) * hd);
            memcpy(kh + (size_t)i * hd, k + base + (size_t)i * D, sizeof(float) * hd);
            memcpy(vh + (size_t)i * hd, v + base + (size_t)i * D, sizeof(float) * hd);
        }
        pm_matmul_nt(s, qh, kh, np, np, hd);
        for (int i = 0; i < np; i++) softmax_row(s + (size_t)i * np, np, scale, mk);
        pm_matmul_nn(oh, s, vh, np, hd, np);
        for (int i = 0; i < np; i++) memcpy(out + base + (size_t)i * D, oh + (size_t)i * hd, sizeof(float) * hd);
    }
    free(anypad);
    free(madd);
    free(ws);
    return PM_OK;
}

int pm_siglip_forward(const pm_siglip *m, const float *pixels, const float *patch_mask, int n_crops, float *features,
                      float *embeddings, pm_err *e) {
    const pm_siglip_config *c = &m->c;
    const int np = m->npatch, D = c->hidden, I = c->intermediate;
    if (n_crops <= 0) return pm_errf(e, PM_EINVAL, "SigLIP forward: %d crops (need at least 1)", n_crops);
    int chunk = CHUNK_ROWS / np;
    if (chunk < 1) chunk = 1;
    if (chunk > n_crops) chunk = n_crops;
    const size_t R = (size_t)chunk * np;
    float *x = pm_malloc(R * D * sizeof(float), e), *h = pm_malloc(R * D * sizeof(float), e);
    float *q = pm_malloc(R * D * sizeof(float), e), *k = pm_malloc(R * D * sizeof(float), e);
    float *v = pm_malloc(R * D * sizeof(float), e), *mlp = pm_malloc(R * I * sizeof(float), e);
    int rc = e->code;
    for (int c0 = 0; c0 < n_crops && !rc; c0 += chunk) {
        const int g = n_crops - c0 < chunk ? n_crops - c0 : chunk;
        const int n = g * np;
        const float *mask = patch_mask + (size_t)c0 * np;
        rc = embed_crops(m, pixels + (size_t)c0 * c->channels * c->image_size * c->image_size, mask, g, x, e);
        if (rc) {
            pm_err_ctx(e, "SigLIP (crops %d..%d): ", c0, c0 + g - 1);
            break;
        }
        if (embeddings) memcpy(embeddings + (size_t)c0 * np * D, x, sizeof(float) * n * D);
        for (int l = 0; l < m->n_run && !rc; l++) {
            if ((rc = pm_err_stopped(e, "SigLIP"))) break;
            const siglip_layer *L = &m->layers[l];
            pm_layernorm(h, x, L->ln1_w, L->ln1_b, n, D, c->ln_eps);
            float *qkv[3] = {q, k, v};
            const pm_tensor *w3[3] = {L->q_w, L->k_w, L->v_w}, *b3[3] = {L->q_b, L->k_b, L->v_b};
            pm_linear_many(qkv, h, n, w3, b3, 3);
            rc = attention(m, q, k, v, mask, g, h, e);
            if (rc) break;
            pm_linear(q, h, n, L->o_w, L->o_b);
            pm_add_inplace(x, q, (size_t)n * D);
            pm_layernorm(h, x, L->ln2_w, L->ln2_b, n, D, c->ln_eps);
            pm_linear(mlp, h, n, L->fc1_w, L->fc1_b);
            if (c->act == PM_SIGLIP_ACT_GELU_TANH) {
#pragma omp parallel for schedule(static)
                for (int r = 0; r < n; r++) gelu_tanh_inplace(mlp + (size_t)r * I, (size_t)I);
            } else {
                const long long nm = (long long)n * I;
#pragma omp parallel for schedule(static)
                for (long long i = 0; i < nm; i++) mlp[i] = pm_gelu_erf(mlp[i]);
            }
            pm_linear(h, mlp, n, L->fc2_w, L->fc2_b);
            pm_add_inplace(x, h, (size_t)n * D);
        }
        if (!rc) memcpy(features + (size_t)c0 * np * D, x, sizeof(float) * n * D);
    }
    free(x); free(h); free(q); free(k); free(v); free(mlp);
    return rc;
}
