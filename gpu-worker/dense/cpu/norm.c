#include <math.h>

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
