/* Attention of one query head over the KV cache; the summation orders are the contract in cpu_kernels.h. */
#include <math.h>
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/kv_format.h"

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

/* scores[0..n_kv) (the scaled dot products) -> expf(s - M); returns (float)(1 / sum) with the sink joined. */
static float softmax_exp(float *scores, int32_t n_kv, float max, const float *sink)
{
    if (sink && *sink > max)
        max = *sink;
    double sum = 0;
    for (int32_t j = 0; j < n_kv; j++) {
        scores[j] = expf(scores[j] - max);
        sum += scores[j];
    }
    if (sink) /* the sink's share of the softmax goes to no value */
        sum += expf(*sink - max);
    return (float)(1.0 / sum);
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
    const float inv = softmax_exp(scores, n_kv, max, sink);
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

void cpu_attention_head_cache(float *out, const float *q, const cpu_kv_head_t *kv, int32_t n_kv, int32_t head_dim,
                              float scale, const float *sink, float *scores, float *rows)
{
    if (kv->kt == GUILD_TYPE_F32 && kv->vt == GUILD_TYPE_F32 && !kv->v_rot) {
        cpu_attention_head(out, q, kv->k, kv->v, (int64_t)(kv->k_stride / sizeof(float)), n_kv, head_dim, scale,
                           sink, scores);
        return;
    }
    float *kr = rows, *vr = rows + head_dim;
    const char *k = kv->k, *v = kv->v;
    float max = -INFINITY;
    for (int32_t j = 0; j < n_kv; j++) {
        kv_load(kv->kt, k + (size_t)j * kv->k_stride, kr, head_dim);
        float s = dot8(q, kr, head_dim) * scale;
        scores[j] = s;
        if (s > max)
            max = s;
    }
    const float inv = softmax_exp(scores, n_kv, max, sink);
    /* out[d] summed over j ascending, as cpu_attention_head_kv's blocks of 8 and tail do */
    for (int32_t d = 0; d < head_dim; d++)
        out[d] = 0.0f;
    for (int32_t j = 0; j < n_kv; j++) {
        const float p = scores[j] * inv;
        kv_load(kv->vt, v + (size_t)j * kv->v_stride, vr, head_dim);
        for (int32_t d = 0; d < head_dim; d++)
            out[d] += p * vr[d];
    }
    if (kv->v_rot)
        kv_hadamard(out, head_dim);
}
