#include <math.h>

#include "gpu-worker/dense/cpu/cpu_kernels.h"

void cpu_router_topk(const float *logits, int32_t n_expert, int32_t k, bool renorm, float scale, int32_t *ids,
                     float *w, float *probs)
{
    float max = -INFINITY;
    for (int32_t e = 0; e < n_expert; e++)
        if (logits[e] > max)
            max = logits[e];
    double sum = 0;
    for (int32_t e = 0; e < n_expert; e++) {
        probs[e] = expf(logits[e] - max);
        sum += probs[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int32_t e = 0; e < n_expert; e++)
        probs[e] *= inv;

    /* selection: k passes, each taking the best expert not taken yet (k is small: 2..16) */
    for (int32_t s = 0; s < k; s++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n_expert; e++) {
            bool taken = false;
            for (int32_t q = 0; q < s && !taken; q++)
                taken = ids[q] == e;
            if (!taken && (best < 0 || probs[e] > probs[best]))
                best = e;
        }
        ids[s] = best;
        w[s] = probs[best];
    }
    if (renorm) {
        float wsum = 0;
        for (int32_t s = 0; s < k; s++)
            wsum += w[s];
        if (wsum < 6.103515625e-5f)
            wsum = 6.103515625e-5f;
        for (int32_t s = 0; s < k; s++)
            w[s] /= wsum;
    }
    if (scale != 0.0f && scale != 1.0f)
        for (int32_t s = 0; s < k; s++)
            w[s] *= scale;
}

void cpu_router_topk_logits(const float *logits, const float *bias, int32_t n_expert, int32_t k, float scale,
                            int32_t *ids, float *w, float *biased)
{
    for (int32_t e = 0; e < n_expert; e++)
        biased[e] = bias ? logits[e] + bias[e] : logits[e];
    /* selection as cpu_router_topk's, on the biased logits */
    for (int32_t s = 0; s < k; s++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n_expert; e++) {
            bool taken = false;
            for (int32_t q = 0; q < s && !taken; q++)
                taken = ids[q] == e;
            if (!taken && (best < 0 || biased[e] > biased[best]))
                best = e;
        }
        ids[s] = best;
    }
    float max = -INFINITY;
    for (int32_t s = 0; s < k; s++)
        if (biased[ids[s]] > max)
            max = biased[ids[s]];
    double sum = 0;
    for (int32_t s = 0; s < k; s++) {
        w[s] = expf(biased[ids[s]] - max);
        sum += w[s];
    }
    const float inv = (float)(1.0 / sum);
    for (int32_t s = 0; s < k; s++)
        w[s] *= inv;
    if (scale != 0.0f && scale != 1.0f)
        for (int32_t s = 0; s < k; s++)
            w[s] *= scale;
}
