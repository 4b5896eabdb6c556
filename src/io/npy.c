/* npy.c — see npy.h. Header: "\x93NUMPY", major, minor, header length (u16 for v1, u32 after),
 * then a Python dict literal with 'descr', 'fortran_order' and 'shape'. */
#include "npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t type_size(pm_npy_type t) {
    switch (t) {
    case PM_NPY_F32: case PM_NPY_I32: return 4;
    case PM_NPY_F64: case PM_NPY_I64: return 8;
    default: return 1;
    }
}

int pm_npy_load(pm_npy *out, const char *path, pm_err *e) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return pm_errf(e, PM_EIO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char pre[10];
    int rc = PM_OK;
    char *hdr = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
        rc = pm_errf(e, PM_EFORMAT, "%s: not a .npy file", path);
        goto done;
    }
    size_t hlen;
    if (pre[6] == 1) hlen = pre[8] | (size_t)pre[9] << 8;
    else {
        unsigned char b2[2];
        if (fread(b2, 1, 2, f) != 2) { rc = pm_errf(e, PM_EFORMAT, "%s: truncated header", path); goto done; }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)b2[0] << 16 | (size_t)b2[1] << 24;
    }
    if (hlen > 1 << 20) { rc = pm_errf(e, PM_EFORMAT, "%s: header too long", path); goto done; }
    hdr = calloc(1, hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) { rc = pm_errf(e, PM_EFORMAT, "%s: truncated header", path); goto done; }
    const char *d = strstr(hdr, "'descr':");
    const char *fo = strstr(hdr, "'fortran_order':");
    const char *sh = strstr(hdr, "'shape':");
    if (!d || !fo || !sh) { rc = pm_errf(e, PM_EFORMAT, "%s: header lacks descr/fortran_order/shape", path); goto done; }
    if (strncmp(fo + 16, " False", 6)) { rc = pm_errf(e, PM_EUNSUPPORTED, "%s: Fortran order not supported", path); goto done; }
    d = strchr(d + 8, '\'');
    if (!d) { rc = pm_errf(e, PM_EFORMAT, "%s: bad descr", path); goto done; }
    d++;
    if (!strncmp(d, "<f4'", 4)) out->type = PM_NPY_F32;
    else if (!strncmp(d, "<f8'", 4)) out->type = PM_NPY_F64;
    else if (!strncmp(d, "<i8'", 4)) out->type = PM_NPY_I64;
    else if (!strncmp(d, "<i4'", 4)) out->type = PM_NPY_I32;
    else if (!strncmp(d, "|b1'", 4)) out->type = PM_NPY_BOOL;
    else if (!strncmp(d, "|u1'", 4)) out->type = PM_NPY_U8;
    else { rc = pm_errf(e, PM_EUNSUPPORTED, "%s: dtype %.6s not supported", path, d); goto done; }
    const char *p = strchr(sh, '(');
    if (!p) { rc = pm_errf(e, PM_EFORMAT, "%s: bad shape", path); goto done; }
    p++;
    out->numel = 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *endp;
        long long v = strtoll(p, &endp, 10);
        if (endp == p || v < 0 || out->ndim >= 8) { rc = pm_errf(e, PM_EFORMAT, "%s: bad shape", path); goto done; }
        out->shape[out->ndim++] = v;
        out->numel *= (size_t)v;
        p = endp;
    }
    size_t bytes = out->numel * type_size(out->type);
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) { rc = pm_errf(e, PM_ENOMEM, "%s: out of memory", path); goto done; }
    if (fread(out->data, 1, bytes, f) != bytes) rc = pm_errf(e, PM_EFORMAT, "%s: data truncated", path);
done:
    free(hdr);
    fclose(f);
    if (rc) pm_npy_free(out);
    return rc;
}

void pm_npy_free(pm_npy *a) {
    free(a->data);
    a->data = NULL;
}

double pm_npy_get(const pm_npy *a, size_t i) {
    switch (a->type) {
    case PM_NPY_F32: return ((const float *)a->data)[i];
    case PM_NPY_F64: return ((const double *)a->data)[i];
    case PM_NPY_I64: return (double)((const int64_t *)a->data)[i];
    case PM_NPY_I32: return ((const int32_t *)a->data)[i];
    case PM_NPY_BOOL: case PM_NPY_U8: return ((const uint8_t *)a->data)[i];
    }
    return 0.0;
}

int pm_npy_save_f32(const char *path, const float *data, int ndim, const int64_t *shape, pm_err *e) {
    FILE *f = fopen(path, "wb");
    if (!f) return pm_errf(e, PM_EIO, "%s: cannot create: %s", path, strerror(errno));
    char dict[256];
    int o = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        o += snprintf(dict + o, sizeof dict - (size_t)o, "%lld%s", (long long)shape[i], ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
        n *= (size_t)shape[i];
    }
    o += snprintf(dict + o, sizeof dict - (size_t)o, "), }");
    int total = 10 + o + 1, pad = (64 - total % 64) % 64;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((o + pad + 1) & 0xff), (unsigned char)((o + pad + 1) >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(dict, 1, (size_t)o, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    size_t w = fwrite(data, sizeof(float), n, f);
    fclose(f);
    return w == n ? PM_OK : pm_errf(e, PM_EIO, "%s: short write", path);
}
