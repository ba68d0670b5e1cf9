#include <math.h>

#include "gpu-worker/dense/cpu/cpu_kernels.h"

/* The chosen experts' weights, in slot order: divided by their sum (floored as llama.cpp clamps it) when the
 * file asks for renormalisation, then scaled (expert_weights_scale; 0 and 1 leave them). Both routers end so. */
static void weights_finish(float *w, int32_t k, bool renorm, float scale)
{
    if (renorm) {
        float wsum = 0;
        for (int32_t j = 0; j < k; j++)
            wsum += w[j];
        if (wsum < 6.103515625e-5f)
            wsum = 6.103515625e-5f;
        for (int32_t j = 0; j < k; j++)
            w[j] /= wsum;
    }
    if (scale != 0.0f && scale != 1.0f)
        for (int32_t j = 0; j < k; j++)
            w[j] *= scale;
}

/* ggml's soft_max of one row: expf(l - max), summed in double in expert order, times (float)(1 / sum). */
static void softmax_probs(const float *logits, int32_t n_expert, float *probs)
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
}

void cpu_router_topk(const float *logits, int32_t n_expert, int32_t k, bool renorm, float scale, int32_t *ids,
                     float *w, float *probs)
{
    softmax_probs(logits, n_expert, probs);

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
    weights_finish(w, k, renorm, scale);
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

/* The k best of v[0..n) (lowest index first on ties), descending, into ids: k passes, each taking the best not
 * taken yet; a NaN loses every comparison, so the first index not taken stands. */
static void top_k(const float *v, int32_t n, int32_t k, int32_t *ids)
{
    for (int32_t s = 0; s < k; s++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n; e++) {
            bool taken = false;
            for (int32_t q = 0; q < s && !taken; q++)
                taken = ids[q] == e;
            if (!taken && (best < 0 || v[e] > v[best]))
                best = e;
        }
        ids[s] = best;
    }
}

/* llama.cpp's group-limited selection on sel[0..n_expert): a group's score is its two best sel summed, the
 * n_group_used best groups (chosen as the experts are: lowest first on ties, a NaN never chosen over a number)
 * keep their experts, the others' sel become -INFINITY. gscore: 2 * n_groups floats. */
static void mask_groups(float *sel, int32_t n_expert, int32_t n_groups, int32_t n_group_used, float *gscore)
{
    const int32_t per = n_expert / n_groups;
    for (int32_t g = 0; g < n_groups; g++) {
        int32_t two[2];
        top_k(sel + (int64_t)g * per, per, 2, two);
        gscore[g] = sel[g * per + two[0]] + sel[g * per + two[1]];
    }
    float *kept = gscore + n_groups;
    for (int32_t g = 0; g < n_groups; g++)
        kept[g] = 0;
    for (int32_t j = 0; j < n_group_used; j++) {
        int32_t best = -1;
        for (int32_t g = 0; g < n_groups; g++)
            if (!kept[g] && (best < 0 || gscore[g] > gscore[best]))
                best = g;
        kept[best] = 1;
    }
    for (int32_t g = 0; g < n_groups; g++)
        if (!kept[g])
            for (int32_t e = g * per; e < (g + 1) * per; e++)
                sel[e] = -INFINITY;
}

void cpu_router_sigmoid_grouped(const float *logits, const float *bias, int32_t n_expert, int32_t k,
                                int32_t n_groups, int32_t n_group_used, bool renorm, float scale, int32_t *ids,
                                float *w, float *scratch)
{
    float *s = scratch, *sel = scratch + n_expert;
    for (int32_t e = 0; e < n_expert; e++) {
        s[e] = 1.0f / (1.0f + expf(-logits[e]));
        sel[e] = bias ? s[e] + bias[e] : s[e];
    }
    if (n_groups > 1)
        mask_groups(sel, n_expert, n_groups, n_group_used, scratch + 2 * n_expert);
    top_k(sel, n_expert, k, ids);
    for (int32_t j = 0; j < k; j++)
        w[j] = s[ids[j]];
    weights_finish(w, k, renorm, scale);
}

void cpu_router_softmax_grouped(const float *logits, int32_t n_expert, int32_t k, int32_t n_groups,
                                int32_t n_group_used, bool renorm, float scale, int32_t *ids, float *w, float *scratch)
{
    if (n_groups <= 1) {
        cpu_router_topk(logits, n_expert, k, renorm, scale, ids, w, scratch);
        return;
    }
    float *probs = scratch, *sel = scratch + n_expert;
    softmax_probs(logits, n_expert, probs);
    for (int32_t e = 0; e < n_expert; e++)
        sel[e] = probs[e];
    mask_groups(sel, n_expert, n_groups, n_group_used, scratch + 2 * n_expert);
    top_k(sel, n_expert, k, ids);
    for (int32_t j = 0; j < k; j++)
        w[j] = probs[ids[j]];
    weights_finish(w, k, renorm, scale);
}
