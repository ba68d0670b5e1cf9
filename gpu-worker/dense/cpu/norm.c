#include <math.h>
#include <stdbool.h>

#include "gpu-worker/dense/cpu/cpu_kernels.h"

void cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = (x[i] * scale) * w[i];
}

uint64_t cpu_rmsnorm_checked(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        out[i] = (x[i] * scale) * w[i];
        finite &= isfinite(out[i]) != 0;
    }
    /* a non-finite or overflowing residual row makes the sum NaN or infinite, so the scale NaN or 0 */
    if (finite && scale > 0.0f)
        return FINITE_NONE;
    if (!(scale > 0.0f)) {
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(x[i]))
                return FINITE_KEY(0, FINITE_RESIDUAL, 0, i);
        return FINITE_KEY(0, FINITE_RESIDUAL, 0, FINITE_ELEM_NONE);
    }
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(out[i]))
            return FINITE_KEY(0, FINITE_NORMED, 0, i);
    return FINITE_NONE; /* unreachable: some output was not finite */
}
