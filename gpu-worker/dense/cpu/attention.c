/* Attention of one query head over the KV cache; the summation orders are the contract in cpu_kernels.h. */
#include <math.h>
#include "gpu-worker/dense/cpu/cpu_kernels.h"

/* dot of n floats in 8 lanes: lane l sums elements l, l+8, l+16, ... in ascending order; the lanes are added
 * as ((0+1)+(2+3))+((4+5)+(6+7)); the n % 8 tail elements are added after, in order. */
static inline float dot8(const float *restrict a, const float *restrict b, int32_t n)
{
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int32_t d = 0;
    for (; d + 8 <= n; d += 8)
        for (int i = 0; i < 8; i++)
            l[i] += a[d + i] * b[d + i];
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; d < n; d++)
        s += a[d] * b[d];
    return s;
}

void cpu_attention_head(float *out, const float *q, const float *k, const float *v, int64_t kv_stride,
                        int32_t n_kv, int32_t head_dim, float scale, const float *sink, float *scores)
{
    cpu_attention_head_kv(out, q, k, v, kv_stride, n_kv, head_dim, head_dim, scale, sink, scores);
}

void cpu_attention_head_kv(float *out, const float *q, const float *k, const float *v, int64_t kv_stride,
                           int32_t n_kv, int32_t dk, int32_t dv, float scale, const float *sink, float *scores)
{
    const int32_t head_dim = dv;
    float max = -INFINITY;
    for (int32_t j = 0; j < n_kv; j++) {
        float s = dot8(q, k + j * kv_stride, dk) * scale;
        scores[j] = s;
        if (s > max)
            max = s;
    }
    if (sink && *sink > max)
        max = *sink;
    double sum = 0;
    for (int32_t j = 0; j < n_kv; j++) {
        scores[j] = expf(scores[j] - max);
        sum += scores[j];
    }
    if (sink) /* the sink's share of the softmax goes to no value */
        sum += expf(*sink - max);
    const float inv = (float)(1.0 / sum);
    /* out[d] accumulates over j ascending; blocks of 8 d's keep 8 sums in registers */
    int32_t d = 0;
    for (; d + 8 <= head_dim; d += 8) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int32_t j = 0; j < n_kv; j++) {
            const float p = scores[j] * inv;
            const float *vj = v + j * kv_stride + d;
            for (int i = 0; i < 8; i++)
                acc[i] += p * vj[i];
        }
        for (int i = 0; i < 8; i++)
            out[d + i] = acc[i];
    }
    for (; d < head_dim; d++) {
        float acc = 0;
        for (int32_t j = 0; j < n_kv; j++)
            acc += (scores[j] * inv) * v[j * kv_stride + d];
        out[d] = acc;
    }
}
