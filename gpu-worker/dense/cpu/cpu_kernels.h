/* gpu-worker/dense/cpu/cpu_kernels.h — the small stateless kernels of the CPU backend's layer program.
 *
 * Each one is the numerical definition of its step; the order of every float operation is part of the contract
 * (a CUDA backend reproduces them within tolerance, another CPU path bit for bit). All run on one thread; the
 * layer program splits work between threads by whole output vectors.
 */
#ifndef GUILD_GPU_WORKER_CPU_KERNELS_H
#define GUILD_GPU_WORKER_CPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model/config.h"
#include "core/quant/types.h"
#include "gpu-worker/dense/finite_check.h"

/* RMSNorm as ggml computes it: sum of x[i]*x[i] (float products) accumulated in double over ascending i;
 * mean = (float)(sum / n); scale = 1 / sqrtf(mean + eps); out[i] = (x[i] * scale) * w[i].
 * out may alias x. */
void cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);

/* cpu_rmsnorm (the same bits) with the non-finite check of gpu-worker/dense/finite_check.h: FINITE_NONE when the
 * row x and the output are finite, else the find's key with site and row 0 (the caller adds them). out must not
 * alias x. */
uint64_t cpu_rmsnorm_checked(float *out, const float *x, const float *w, int64_t n, float eps);

/* RoPE tables: cos/sin for one position, for each of the n_rot/2 rotation pairs. */
typedef struct cpu_rope {
    int32_t n_rot;
    bool neox;           /* pair (i, i + n_rot/2) instead of (2i, 2i+1) */
    double *inv_freq;    /* [n_rot/2] base^(-2i/n_rot), in double */
    double freq_scale;   /* linear / yarn interpolation factor (1 when none) */
    double ext_factor;   /* yarn: extrapolation mix (0 when not yarn) */
    double attn_factor;  /* yarn: magnitude factor */
    double corr_lo, corr_hi; /* yarn: ramp dimensions */
} cpu_rope_t;

/* Fills r from the configuration and the optional per-pair frequency divisors freq_factors[n_rot/2] (NULL when
the model has none): inv_freq[i] = base^(-2i/n_rot) / freq_factors[i]. Allocates inv_freq (free with
cpu_rope_fini); -1 when out of memory. */
int cpu_rope_init(cpu_rope_t *r, const model_config_t *cfg, const float *freq_factors);
void cpu_rope_fini(cpu_rope_t *r);

/* cs[2*i] = cos, cs[2*i+1] = sin of pair i at position pos (cs holds n_rot floats). Angles and their cos/sin
 * are computed in double (ggml's rope_yarn formulas) and rounded to float once. */
void cpu_rope_table(const cpu_rope_t *r, int32_t pos, float *cs);

/* Rotates n_heads consecutive heads of head_dim floats in place with the table of one position. */
void cpu_rope_apply(const cpu_rope_t *r, float *x, int32_t n_heads, int32_t head_dim, const float *cs);

/* One query head against positions 0..n_kv-1 of its KV head (a sliding window passes k and v from its first
 * position):
 *   s[j] = dot8(q, k_j) * scale, dot8 summing in 8 lanes (lane l: d = l, l+8, ... ascending), the lanes added
 *          as ((0+1)+(2+3))+((4+5)+(6+7)), then the head_dim % 8 last products in order  (float)
 *   M    = max s, and the sink logit when sink != NULL
 *   p[j] = expf(s[j] - M) * (float)(1 / sum), sum in double over ascending j, then + expf(sink - M) with a sink
 *          (the sink joins the softmax as ggml's soft_max with sinks, and adds no value)
 *   out[d] = sum over j ascending of p[j] * v_j[d]                                   (float)
 * k_j = k + j * kv_stride (floats), likewise v. scores: scratch of n_kv floats. */
void cpu_attention_head(float *out, const float *q, const float *k, const float *v, int64_t kv_stride,
                        int32_t n_kv, int32_t head_dim, float scale, const float *sink, float *scores);

/* cpu_attention_head with keys of dk floats and values of dv (the same order of every operation): s[j] over the
 * dk floats of q and k_j, out over the dv floats of v_j; cpu_attention_head is this with dk = dv = head_dim.
 * Multi-head latent attention's absorbed form passes the cache row as both, its first dv floats the values. */
void cpu_attention_head_kv(float *out, const float *q, const float *k, const float *v, int64_t kv_stride,
                           int32_t n_kv, int32_t dk, int32_t dv, float scale, const float *sink, float *scores);

/* One KV head's rows in the cache's format (gpu-worker/dense/kv_format.h): position j's key head at k + j *
 * k_stride bytes in element type kt, its value head at v + j * v_stride in vt, the values rotated by kv_hadamard
 * when v_rot. */
typedef struct cpu_kv_head {
    guild_type_t kt, vt;
    const void *k, *v;
    size_t k_stride, v_stride;
    bool v_rot;
} cpu_kv_head_t;

/* cpu_attention_head over a cache in any format: each key and value head is dequantized as it is read (kv_load,
 * into rows: 2 * head_dim floats of scratch), then every operation is cpu_attention_head's, in its order, on
 * those floats (out[d] summed over j ascending from 0.0f); with v_rot, out then goes through kv_hadamard once
 * (the rotation undone on the weighted sum). An f32 cache without rotation takes cpu_attention_head itself. */
void cpu_attention_head_cache(float *out, const float *q, const cpu_kv_head_t *kv, int32_t n_kv, int32_t head_dim,
                              float scale, const float *sink, float *scores, float *rows);

/* The router of one token: probabilities = softmax(logits[n_expert]) (expf of logit - max, sum in double,
 * multiplied by (float)(1/sum)); the k largest (lowest id first on ties) in descending order go to ids[0..k)
 * and their probabilities to w[0..k); with renorm they are divided by their float sum (clamped below at
 * 6.103515625e-5, as llama.cpp does); then multiplied by scale when scale is neither 0 nor 1. probs: scratch
 * of n_expert floats. */
void cpu_router_topk(const float *logits, int32_t n_expert, int32_t k, bool renorm, float scale, int32_t *ids,
                     float *w, float *probs);

/* The top-k-then-softmax router of one token (gpt-oss): l[e] = logits[e] + bias[e] (float; bias NULL: none); the
 * k largest l (lowest id first on ties) in descending order go to ids[0..k); w[s] = expf(l[ids[s]] - M) *
 * (float)(1 / sum), M the largest of the k, the sum in double over s ascending (ggml's soft_max of the k chosen
 * logits); then multiplied by scale when scale is neither 0 nor 1. biased: scratch of n_expert floats. */
void cpu_router_topk_logits(const float *logits, const float *bias, int32_t n_expert, int32_t k, float scale,
                            int32_t *ids, float *w, float *biased);
/* The grouped sigmoid router of one token (llama.cpp's build_moe_ffn with sigmoid gating):
 *   s[e]   = 1 / (1 + expf(-logits[e]))                           the gates (float)
 *   sel[e] = s[e] + bias[e] (bias NULL: s[e])                      the selection scores (float)
 *   groups (n_groups > 1, n_expert / n_groups experts each, ascending ids): a group's score is its largest sel
 *          plus its second largest (float); the n_group_used best groups (lowest group first on ties) keep their
 *          experts, the others' sel become -INFINITY
 *   ids    = the k largest sel (lowest id first on ties), descending; w[j] = s[ids[j]] (the gate, without bias)
 * then, with renorm, w divided by their float sum over ascending j (clamped below at 6.103515625e-5), then
 * multiplied by scale when it is neither 0 nor 1. A NaN never yields an invalid or repeated id (comparisons with
 * it fail: the first expert not taken yet stands). scratch: cpu_router_sigmoid_scratch(n_expert, n_groups)
 * floats. */
void cpu_router_sigmoid_grouped(const float *logits, const float *bias, int32_t n_expert, int32_t k,
                                int32_t n_groups, int32_t n_group_used, bool renorm, float scale, int32_t *ids,
                                float *w, float *scratch);

/* The softmax router with llama.cpp's expert groups (DeepSeek-V2 files that carry expert_group_count): the
 * probabilities as cpu_router_topk computes them; the groups as cpu_router_sigmoid_grouped's, scored on the
 * probabilities; ids = the k largest probabilities of the kept groups (lowest id first on ties), descending;
 * w[j] = probs[ids[j]], renormalised and scaled as cpu_router_topk's. n_groups <= 1: cpu_router_topk itself.
 * scratch: cpu_router_sigmoid_scratch(n_expert, n_groups) floats. */
void cpu_router_softmax_grouped(const float *logits, int32_t n_expert, int32_t k, int32_t n_groups,
                                int32_t n_group_used, bool renorm, float scale, int32_t *ids, float *w, float *scratch);

/* Floats of scratch cpu_router_sigmoid_grouped and cpu_router_softmax_grouped need. */
static inline int64_t cpu_router_sigmoid_scratch(int32_t n_expert, int32_t n_groups)
{
    return 2 * (int64_t)n_expert + (n_groups > 1 ? 2 * (int64_t)n_groups : 0);
}

#endif
