#include <math.h>

#include "gpu-worker/cpu/cpu_kernels.h"

void cpu_attention_head(float *out, const float *q, const float *k, const float *v, int64_t kv_stride,
                        int32_t n_kv, int32_t head_dim, float scale, float *scores)
{
    float max = -INFINITY;
    for (int32_t j = 0; j < n_kv; j++) {
        const float *kj = k + j * kv_stride;
        float s = 0;
        for (int32_t d = 0; d < head_dim; d++)
            s += q[d] * kj[d];
        s *= scale;
        scores[j] = s;
        if (s > max)
            max = s;
    }
    double sum = 0;
    for (int32_t j = 0; j < n_kv; j++) {
        scores[j] = expf(scores[j] - max);
        sum += scores[j];
    }
    const float inv = (float)(1.0 / sum);
    for (int32_t d = 0; d < head_dim; d++)
        out[d] = 0;
    for (int32_t j = 0; j < n_kv; j++) {
        const float p = scores[j] * inv;
        const float *vj = v + j * kv_stride;
        for (int32_t d = 0; d < head_dim; d++)
            out[d] += p * vj[d];
    }
}
