/* npy.h — a small reader for NumPy .npy files (v1/v2/v3, little-endian, C order): float32,
 * float64, int64, int32, bool and uint8. Used by the parity tool and the tests. */
#ifndef PM_NPY_H
#define PM_NPY_H

#include <stdint.h>
#include <stddef.h>
#include "../util/err.h"

typedef enum { PM_NPY_F32, PM_NPY_F64, PM_NPY_I64, PM_NPY_I32, PM_NPY_BOOL, PM_NPY_U8 } pm_npy_type;

typedef struct pm_npy {
    pm_npy_type type;
    int ndim;
    int64_t shape[8];
    size_t numel;
    void *data;   /* malloc'd, numel elements of type */
} pm_npy;

int pm_npy_load(pm_npy *out, const char *path, pm_err *e);
void pm_npy_free(pm_npy *a);
/* Element i as double, whatever the type. */
double pm_npy_get(const pm_npy *a, size_t i);
/* Writes a float32 array (for debugging dumps). */
int pm_npy_save_f32(const char *path, const float *data, int ndim, const int64_t *shape, pm_err *e);

#endif
