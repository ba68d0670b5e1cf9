/* gpu-worker/dense/cuda/cuda_kernels.h — the checked entry points of the CUDA backend's kernels (one op per .cu
 * file: kernel -> launcher taking a stream -> the entry point declared here), callable from C.
 *
 * Every entry point only enqueues work on stream `s` (nothing waits); it returns 0, or -1 with a message when
 * an argument is outside what the kernel handles or the launch failed. Pointers are device pointers unless a
 * contract says otherwise; "ld" arguments are the distance between rows in elements.
 *
 * Numerical contract against the CPU backend (tests/cuda/check_cuda_kernels.c measures it):
 *   - cuda_quantize, cuda_matmul, cuda_get_rows, cuda_rope, cuda_add*, cuda_swiglu's products: the same bits
 *     as the CPU references (quant_quantize_row_ref, quant_vec_dot_ref, quant_dequantize_row_ref,
 *     cpu_rope_apply): the same float operations in the same order, integer sums exact.
 *   - cuda_rmsnorm: the double sum is reduced in another order (differences below 1 ulp of the float mean).
 *   - expf-based steps (router softmax, SiLU, sigmoid): CUDA's expf is within 2 ulp of the C library's.
 *   - attention: the reductions are parallel; K/V are read from the cache (F16 by default, or F32).
 */
#ifndef GUILD_GPU_WORKER_CUDA_KERNELS_H
#define GUILD_GPU_WORKER_CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
/* core/util/err.h is C11 (`_Noreturn`, no extern "C" block of its own). */
#define _Noreturn [[noreturn]]
extern "C" {
#endif
#include "core/kern/pack_layout.h"
#include "core/quant/blocks.h"
#include "core/quant/types.h"
#include "core/sample/logits_pick.h"
#include "core/util/err.h"
#include "gpu-worker/dense/cuda/cuda_timeline.h"
#ifdef __cplusplus
#undef _Noreturn
#endif

/* Programmatic dependent launch (cuda_common.cuh's cuda_launch_pdl) for the kernels that take it: a kernel of a
 * decode step's chain launches while the one before it ends. Process-wide, on by default; the backend sets it from
 * cuda_config_t.no_pdl (debugging). The bits are the same either way. */
void cuda_set_pdl(bool on);
bool cuda_pdl_enabled(void);

/* The fused router's form (cuda_router_fused, cuda_router_fused_norm): a thread block cluster of `blocks` (8 or 16)
 * per token, whose blocks hand their logits to the first one through distributed shared memory behind the cluster's
 * hardware barrier; 0: the blocks count themselves on a device counter and the last one reads the logits back
 * (the form without clusters, also taken where a cluster does not apply). Process-wide, for measurement and tests;
 * the default is CUDA_ROUTER_CLUSTER_DEFAULT. The bits are the same in every form. Returns the form set: 0 where
 * this device cannot run clusters of that size. */
#define CUDA_ROUTER_CLUSTER_DEFAULT 16
int cuda_set_router_cluster(int blocks);
int cuda_router_cluster(void);

/* ---- activations and weights ---------------------------------------------------------------------------- */

/* Quantizes n_rows rows of n floats (x rows ldx floats apart) into act_type (F32 copies; Q8_0, Q8_1, Q8_K),
 * rows dst_stride bytes apart: byte for byte what quant_quantize_row_ref writes. n must be a whole number of
 * blocks. */
int cuda_quantize(guild_type_t act_type, const float *x, int64_t ldx, void *dst, size_t dst_stride, int64_t n,
                  int32_t n_rows, cudaStream_t s, guild_err_t *err);

/* cuda_quantize for the rows r with lo <= keep[r] < hi only (keep device [n_rows]; F32: every row): the other
 * rows of dst are left as they were. A part of a layer's experts quantizes only its own pairs' rows. */
int cuda_quantize_rows(guild_type_t act_type, const float *x, int64_t ldx, void *dst, size_t dst_stride, int64_t n,
                       int32_t n_rows, const int32_t *keep, int32_t lo, int32_t hi, cudaStream_t s,
                       guild_err_t *err);

/* True when cuda_matmul and cuda_get_rows handle weights of `type` (gpu_plan_type_supported's list, which the
 * kernels' dispatch must follow). */
bool cuda_type_supported(guild_type_t type);

/* The names of the supported types, for messages ("f32 f16 ..."). */
const char *cuda_supported_types(void);

/* out[t * ldo + r] = quant_vec_dot_ref(type, n, w + r * w_stride, act + t * act_stride) for r < nrows, t < ntok,
 * bit for bit; act rows are in quant_type_info(type)->dot_type (cuda_quantize), well-formed (Q8_K bsums the
 * sums of their qs: large batches of the cuda_expert_mma_supported types go through the int8 tensor-core
 * kernel, which sums the qs). Weight rows must be 16-byte aligned for Q4_K and Q5_K, 4-byte aligned for F32,
 * Q4_1, Q5_1 and IQ4_XS, 2-byte aligned otherwise (the backend's weights are 256-byte aligned). */
int cuda_matmul(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w, size_t w_stride,
                const void *act, size_t act_stride, float *out, int64_t ldo, cudaStream_t s, guild_err_t *err);

/* n_heads independent products in one launch (multi-head latent attention's per-head up-projections): product h
 * is cuda_matmul's with weights w + h * w_head bytes, activations act + h * act_head bytes and output
 * out + h * out_head floats, the same bits as n_heads cuda_matmul calls; batches that would take the mma kernel
 * run head by head (cuda_matmul's choice). The heads' offsets must keep the rows' alignment. */
int cuda_matmul_heads(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, int32_t n_heads, const void *w,
                      size_t w_stride, size_t w_head, const void *act, size_t act_stride, size_t act_head, float *out,
                      int64_t ldo, int64_t out_head, cudaStream_t s, guild_err_t *err);

/* count (1..4) products of one activation, each with weights of `type` and width n: out[i] = cuda_matmul(type,
 * n, nrows[i], ntok, w[i], w_stride[i], act, act_stride) (ldo[i]), the same bits; for a quantized type below
 * CUDA_MATMUL_MMA_MIN_TOK tokens in one launch (a decode step's Q, K and V), otherwise product by product. */
int cuda_matmul_multi(guild_type_t type, int64_t n, int32_t ntok, int32_t count, const void *const *w,
                      const size_t *w_stride, const int64_t *nrows, const void *act, size_t act_stride,
                      float *const *out, const int64_t *ldo, cudaStream_t s, guild_err_t *err);

/* cuda_matmul whose launch also asks l2_bytes at l2 into L2 before its wait (prefetch hints, a 128-byte line a
 * thread of the one-token kernels; nothing where another kernel runs the product): the next kernel's weights, where
 * that kernel cannot start before this one ends. l2 NULL: cuda_matmul. The same bits. */
int cuda_matmul_l2(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w, size_t w_stride,
                   const void *act, size_t act_stride, float *out, int64_t ldo, const void *l2, size_t l2_bytes,
                   cudaStream_t s, guild_err_t *err);

/* As cuda_matmul_multi with product i of type[i], the types all of one dot type: products of two K-quant types
 * (Q4_K with Q6_K, Q5_K with Q6_K, Q4_K with Q5_K) below CUDA_MATMUL_MMA_MIN_TOK tokens in one launch (a step's Q
 * and K with a V of more bits), one type as cuda_matmul_multi, others product by product; the same bits. */
int cuda_matmul_multi_types(const guild_type_t *type, int64_t n, int32_t ntok, int32_t count, const void *const *w,
                            const size_t *w_stride, const int64_t *nrows, const void *act, size_t act_stride,
                            float *const *out, const int64_t *ldo, cudaStream_t s, guild_err_t *err);

/* Batches of at least this many tokens of a cuda_expert_mma_supported type take the mma kernel: below it its
 * tiles of 64 tokens are mostly empty and its grid (nrows / 128 blocks) too small to fill the GPU; from 2 tokens
 * below it they take the few-token tensor-core kernel (matmul_rule.h's cuda_matmul_few_rule), one token the dp4a
 * kernel. tests/cuda/check_cuda_expert_mma's dense and few timings measure the crossovers. */
#define CUDA_MATMUL_MMA_MIN_TOK 32

/* cuda_matmul's two paths at any token count, the same bits, for tests and timings: _dp4a the CUDA-core kernels
 * (every supported type); _mma the int8 tensor-core kernel (sm_80+; -1 with a message for a type that
 * cuda_expert_mma_supported() rejects) in blocks of block_rows weight rows: 64, 128, or 0 for cuda_matmul's
 * choice (64 when blocks of 128 would give an SM fewer than two). */
int cuda_matmul_dp4a(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w, size_t w_stride,
                     const void *act, size_t act_stride, float *out, int64_t ldo, cudaStream_t s, guild_err_t *err);
int cuda_matmul_mma(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w, size_t w_stride,
                    const void *act, size_t act_stride, float *out, int64_t ldo, int32_t block_rows, cudaStream_t s,
                    guild_err_t *err);
/* cuda_matmul's few-token tensor-core kernel (a decode step's batches: cuda_matmul_few_rule) at any token count,
 * the same bits, for tests and timings: blocks of tile_tokens tokens (8 or 16) and k_warps warps along K (2, 4, 8
 * or 16), 0 for cuda_matmul's choice; -1 for a type cuda_expert_mma_supported() rejects. */
int cuda_matmul_few(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w, size_t w_stride,
                    const void *act, size_t act_stride, float *out, int64_t ldo, int32_t tile_tokens, int32_t k_warps,
                    cudaStream_t s, guild_err_t *err);

/* The shape every launch of the few-token kernel takes where its caller names none (cuda_matmul, cuda_matmul_multi,
 * cuda_matmul_multi_types): tile_tokens (8 or 16) and k_warps (2, 4, 8 or 16), 0 for the rule's choice of each
 * (k_warps 0: the rule's warps fitted to the grid on this GPU). Process-wide, for measurement and tests; the bits
 * are the same in every shape. -1 (err) for other values. */
int cuda_set_matmul_few_shape(int32_t tile_tokens, int32_t k_warps, guild_err_t *err);

/* One-token products (cuda_matmul, cuda_matmul_heads with one token, quantized weights of at least two steps of
 * blocks a row, rows that fit on the GPU at once split: matmul.cu's mm_split_warps) with a row's block sums split
 * over 2 or 4 warps and added in block order by one lane (matmul_q_split_kernel), process-wide, on unless turned off
 * (--cuda-off mm-split: measurement); the same bits. */
void cuda_set_matmul_split(bool on);

/* cuda_matmul_multi on the dp4a kernels only (the launch it made before the few-token kernel), for tests and
 * timings; the same bits. */
int cuda_matmul_multi_dp4a(guild_type_t type, int64_t n, int32_t ntok, int32_t count, const void *const *w,
                           const size_t *w_stride, const int64_t *nrows, const void *act, size_t act_stride,
                           float *const *out, const int64_t *ldo, cudaStream_t s, guild_err_t *err);

/* out[i * ldo + 0 .. n) = quant_dequantize_row_ref(type, row ids[i] of w) for i < n_ids (w rows row_bytes
 * apart; ids is a device array, every id must be a valid row). */
int cuda_get_rows(guild_type_t type, const void *w, size_t row_bytes, int64_t n, const int32_t *ids, int32_t n_ids,
                  float *out, int64_t ldo, cudaStream_t s, guild_err_t *err);

/* ---- the layer's small ops ------------------------------------------------------------------------------ */

/* cpu_rmsnorm of n_rows rows: out row i = rmsnorm(x row r, w), r = rows ? rows[i] : i (rows: device array).
 * out may alias x when rows is NULL and ldo == ldx. */
int cuda_rmsnorm(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows, const float *w,
                 int64_t n, int32_t n_rows, float eps, cudaStream_t s, guild_err_t *err);

/* cuda_rmsnorm (the same bits) with the non-finite check of gpu-worker/dense/finite_check.h at `site` (<
 * FINITE_MAX_SITES): a find's key, with the row x is read from (rows[i] or i), is atomically min'ed into the
 * device word *found, which the caller sets to FINITE_NONE before and reads after the stream has run it.
 * found NULL: cuda_rmsnorm. out may alias x as there. */
int cuda_rmsnorm_checked(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows, const float *w,
                         int64_t n, int32_t n_rows, float eps, uint64_t *found, uint32_t site, cudaStream_t s,
                         guild_err_t *err);

/* *found = FINITE_NONE once the kernels before it on the stream have finished: the check's start of a step as one
 * more kernel of the chain (programmatic dependent launch), where a memset would be a graph's only memset node
 * between the embedding and the first norm. */
int cuda_finite_reset(uint64_t *found, cudaStream_t s, guild_err_t *err);

/* The residual update a fused norm applies first (cuda_rmsnorm_fused). */
typedef enum cuda_pre_kind {
    CUDA_PRE_NONE = 0,
    CUDA_PRE_ADD,     /* cuda_add(x, p, ...) */
    CUDA_PRE_COMBINE, /* cuda_moe_combine(x, y, w, sh, sh_logit, ..., n_used, ...), or with y_at _at's */
} cuda_pre_kind_t;

typedef struct cuda_norm_pre {
    cuda_pre_kind_t kind;
    const float *p;                    /* ADD: the addend, rows of n */
    const float *y, *w, *sh, *sh_logit; /* COMBINE: cuda_moe_combine's operands */
    const float *const *y_at;           /* COMBINE: NULL, or y read from this device word (cuda_moe_combine_at) */
    int32_t n_used;
} cuda_norm_pre_t;

/* A layer's step into a block as one launch where it can be, the bits of the separate launches:
 *   pre (NULL or CUDA_PRE_NONE: none) applied to x;  cuda_rmsnorm_checked(out, n, x, n, NULL, w, n, n_rows, eps,
 *   found, site);  with q, cuda_quantize(q_type, out, n, q, q_stride, n, n_rows).
 * Rows are contiguous (n floats apart). One kernel when a row fits the norm's registers (n <= 2048) and q_type is
 * Q8_0, Q8_1 or Q8_K of whole blocks (or no q); else the separate launches. */
int cuda_rmsnorm_fused(float *out, float *x, const float *w, int64_t n, int32_t n_rows, float eps, uint64_t *found,
                       uint32_t site, const cuda_norm_pre_t *pre, guild_type_t q_type, void *q, size_t q_stride,
                       cudaStream_t s, guild_err_t *err);

/* cuda_rmsnorm_fused's cluster form, process-wide, on unless turned off (--cuda-off norm-cluster: measurement): for up
 * to CUDA_NORM_CLUSTER_ROWS rows of 257 to 2048 elements on an sm_90 device, a row's elements spread over a cluster of
 * blocks (rmsnorm.cu's rmsnorm_cl_kernel) instead of one block; the same bits. */
#define CUDA_NORM_CLUSTER_ROWS 16
void cuda_set_norm_cluster(bool on);

/* cpu_rope_apply on n_heads heads of head_dim floats of each of n_tok rows (ldx floats apart); token t uses
 * table row pos0 + t of cs (n_rot floats per position: cos, sin pairs, as cpu_rope_table writes them). */
int cuda_rope(float *x, int64_t ldx, int32_t n_tok, int32_t n_heads, int32_t head_dim, int32_t n_rot, bool neox,
              const float *cs, int32_t pos0, cudaStream_t s, guild_err_t *err);

/* cuda_rope with pos0 read by the kernel from the device int *pos0 (captured graphs replay at any position). */
int cuda_rope_dyn(float *x, int64_t ldx, int32_t n_tok, int32_t n_heads, int32_t head_dim, int32_t n_rot, bool neox,
                  const float *cs, const int32_t *pos0, cudaStream_t s, guild_err_t *err);

/* x[t * ldx + i] = x[t * ldx + i] + b[i] for i < n, t < n_rows (bias). */
int cuda_add_bias(float *x, int64_t ldx, const float *b, int64_t n, int32_t n_rows, cudaStream_t s,
                  guild_err_t *err);

/* x[i] = p[i] + x[i] for i < n (residual). */
int cuda_add(float *x, const float *p, int64_t n, cudaStream_t s, guild_err_t *err);

/* g[i] = silu(g[i]) * u[i] for i < n (model_silu). */
int cuda_swiglu(float *g, const float *u, int64_t n, cudaStream_t s, guild_err_t *err);

/* Writes the K and V rows of n_tok tokens (kv_dim floats each, rows kv_dim apart) into cache rows
 * pos0 .. pos0 + n_tok - 1 (kv_dim elements per row) of a cache of kv_type: F16 (round to nearest even) or F32. */
int cuda_kv_store(guild_type_t kv_type, void *k_cache, void *v_cache, const float *k, const float *v, int64_t kv_dim,
                  int32_t n_tok, int32_t pos0, cudaStream_t s, guild_err_t *err);

/* cuda_kv_store with pos0 read from the device int *pos0. */
int cuda_kv_store_dyn(guild_type_t kv_type, void *k_cache, void *v_cache, const float *k, const float *v,
                      int64_t kv_dim, int32_t n_tok, const int32_t *pos0, cudaStream_t s, guild_err_t *err);

/* cuda_kv_store into caches of the block formats (gpu-worker/dense/kv_format.h): keys in kt, values in vt (Q8_0 or
 * Q4_0), each head's values through the Walsh-Hadamard rotation first with v_rot (k8v4); quantized as
 * kv_store_row does on the CPU, operation for operation (the same bytes from the same floats). Rows start at
 * pos0, or at *pos_dev when it is not NULL. head_dim: a multiple of 32 (a power of two with v_rot), kv_dim a
 * multiple of it. */
int cuda_kv_store_blocks(guild_type_t kt, guild_type_t vt, bool v_rot, void *k_cache, void *v_cache, const float *k,
                         const float *v, int64_t kv_dim, int32_t head_dim, int32_t n_tok, int32_t pos0,
                         const int32_t *pos_dev, cudaStream_t s, guild_err_t *err);

/* cuda_rmsnorm of each head of q (n_tok rows of n_head heads) with q_norm and of k with k_norm (both NULL: no
 * norm), then cuda_rope_dyn of both, then cuda_kv_store_dyn of k and v, in one kernel with the same bits.
 * head_dim: a multiple of 32 up to 256. */
int cuda_qk_prepare(float *q, float *k, const float *v, int32_t n_tok, int32_t n_head, int32_t n_head_kv,
                    int32_t head_dim, const float *q_norm, const float *k_norm, float eps, int32_t n_rot, bool neox,
                    const float *cs, const int32_t *pos, guild_type_t kv_type, void *k_cache, void *v_cache,
                    cudaStream_t s, guild_err_t *err);

/* cpu_router_softmax_grouped for n_tok tokens (n_groups <= 1: cpu_router_topk): logits [n_tok][n_expert] ->
 * ids/w [n_tok][k], the same experts, the weights within float rounding (the softmax's sum). n_expert <= 1024,
 * k <= 32, groups as the CPU's. With counts (NULL: none), cuda_route_count's counting of the chosen ids too. */
int cuda_router_topk(const float *logits, int32_t n_tok, int32_t n_expert, int32_t k, int32_t n_groups,
                     int32_t n_group_used, bool renorm, float scale, int32_t *ids, float *w,
                     unsigned long long *counts, cudaStream_t s, guild_err_t *err);

/* The router's product and cuda_router_topk in one launch, for a decode step's tokens (up to
 * CUDA_ROUTER_FUSED_MAX: one session's or several's): logits [n_tok][n_expert] = cuda_matmul(F32, n_embd, n_expert,
 * n_tok, W, w_stride, x, ldx floats) (the same bits), then ids/w/counts as cuda_router_topk from them (the same
 * bits); each token's bits are those it gets alone. done: CUDA_ROUTER_FUSED_MAX device counters, 0 before the
 * launch and after it (token t's blocks count themselves on done[t]; the cluster form, cuda_set_router_cluster,
 * leaves them alone); one set per stream. The prefetch hint (ffn_moe.c) takes as many rows, one set of buffers. */
#define CUDA_ROUTER_FUSED_MAX 16
int cuda_router_fused(const float *W, size_t w_stride, const float *x, int64_t ldx, int32_t n_embd, float *logits,
                      int32_t n_tok, int32_t n_expert, int32_t k, int32_t n_groups, int32_t n_group_used,
                      bool renorm, float scale, int32_t *ids, float *w, unsigned long long *counts,
                      unsigned int *done, cudaStream_t s, guild_err_t *err);

/* cuda_router_fused with the block norm in front of it in the same launch, the bits of cuda_rmsnorm_fused(xn, x,
 * w, n_embd, n_tok, eps, found, site, pre: the addition of p (or none), no quantization) then cuda_router_fused on
 * xn (n_embd floats apart): each of the launch's blocks norms its token's row for itself, the token's last one
 * writes it to x (with p) and xn. Rows are contiguous; n_embd <= CUDA_ROUTER_NORM_MAX (the rows in registers).
 * With pub, a lone token's launch in the cluster form also does cuda_xchg_publish(&pub->view, pub->d,
 * pub->layer, 1, n_embd, k, xn, ids) (gpu-worker/dense/cuda/cuda_xchg.h): then it returns 1; 0 where it did not
 * (the caller publishes), -1 with a message. */
#define CUDA_ROUTER_NORM_MAX 2048
struct cuda_xchg_pub; /* cuda_xchg.h */
typedef struct cuda_router_norm {
    float *x;        /* [n_tok][n_embd] the residual rows; x + p written back when p */
    const float *p;  /* NULL, or [n_tok][n_embd] the pending residual addition (cuda_norm_pre_t's ADD) */
    const float *w;  /* [n_embd] the norm's weights */
    float eps;
    float *xn;       /* [n_tok][n_embd] the normed rows out (NULL: not kept) */
    uint64_t *found; /* the non-finite check's device word at `site` (NULL: no check) */
    uint32_t site;
    const struct cuda_xchg_pub *pub; /* NULL, or the MoE exchange a lone token may be published to */
} cuda_router_norm_t;
int cuda_router_fused_norm(const cuda_router_norm_t *nm, const float *W, size_t w_stride, int32_t n_embd,
                           float *logits, int32_t n_tok, int32_t n_expert, int32_t k, int32_t n_groups,
                           int32_t n_group_used, bool renorm, float scale, int32_t *ids, float *w,
                           unsigned long long *counts, unsigned int *done, cudaStream_t s, guild_err_t *err);

/* logits_pick (core/sample/logits_pick.h) of each of n_rows rows of n logits, ld floats apart, into picks[n_rows]
 * (device memory): the same ids as the scalar reference (logits_pick.cu). */
int cuda_logits_pick(const float *logits, int32_t n_rows, int32_t n, size_t ld, logits_pick_t *picks, cudaStream_t s,
                     guild_err_t *err);

/* counts[ids[i]] += 1 for the n_pairs routed pairs ids[0..n_pairs) of one layer (ids < 0 or >= n_expert are not
 * counted); counts: that layer's [n_expert] device counters (route_count.cu). */
int cuda_route_count(const int32_t *ids, int32_t n_pairs, int32_t n_expert, unsigned long long *counts,
                     cudaStream_t s, guild_err_t *err);

/* cpu_router_topk_logits (gpt-oss) for n_tok tokens: logits [n_tok][n_expert] (+ bias [n_expert], NULL: none) ->
 * ids/w [n_tok][k], the same experts, the weights within float rounding of expf. n_expert <= 1024, k <= 32. */
int cuda_router_topk_logits(const float *logits, const float *bias, int32_t n_tok, int32_t n_expert, int32_t k,
                            float scale, int32_t *ids, float *w, cudaStream_t s, guild_err_t *err);

/* cpu_router_sigmoid_grouped for n_tok tokens: logits [n_tok][n_expert], bias [n_expert] or NULL -> ids/w
 * [n_tok][k]. n_expert <= 1024, k <= 32; groups (n_groups > 1) equal, of at least 2, the n_group_used best
 * holding at least k experts. */
int cuda_router_sigmoid_grouped(const float *logits, const float *bias, int32_t n_tok, int32_t n_expert, int32_t k,
                                int32_t n_groups, int32_t n_group_used, bool renorm, float scale, int32_t *ids,
                                float *w, cudaStream_t s, guild_err_t *err);

/* The MoE combine of the CPU backend, per token t and element i < n_embd:
 *   acc = w[t][0] * y[t][0][i];  acc = acc + w[t][k] * y[t][k][i] for k = 1 .. n_used-1;
 *   with sh and sh_logit: acc = acc + sh[t][i] * sigmoid(sh_logit[t]); with sh alone (an ungated shared
 *   expert): acc = acc + sh[t][i];   x[t][i] = acc + x[t][i]. */
int cuda_moe_combine(float *x, const float *y, const float *w, const float *sh, const float *sh_logit,
                     int32_t n_tok, int32_t n_used, int64_t n_embd, cudaStream_t s, guild_err_t *err);
/* cuda_moe_combine with y read by the kernel from the device word *y_at (written by a kernel before it on the
 * stream: cuda_xchg_wait's, the exchange slot's rows in mapped host memory, read with volatile loads). */
int cuda_moe_combine_at(float *x, const float *const *y_at, const float *w, const float *sh, const float *sh_logit,
                        int32_t n_tok, int32_t n_used, int64_t n_embd, cudaStream_t s, guild_err_t *err);
/* A pending combine (pre: kind CUDA_PRE_COMBINE) on its own: cuda_moe_combine_at with pre->y_at, else
 * cuda_moe_combine. */
int cuda_moe_combine_pre(float *x, const cuda_norm_pre_t *pre, int32_t n_tok, int64_t n_embd, cudaStream_t s,
                         guild_err_t *err);

/* ---- routed experts on the device (gpu-worker/dense/cuda/cuda_moe_gpu.c) ------------------------------------------ */

/* The n_pairs = n_tok * n_used (token, slot) pairs p = t * n_used + k of ids [n_tok][n_used], grouped by expert
 * for cuda_expert_matmul: order[n_pairs] lists the pair indices expert by expert; tiles (16-byte aligned,
 * cuda_expert_max_tiles(...) rows of 4 int32) holds {expert, first index into order, count <= tile, 0}; *n_tiles
 * the rows used (device int). n_expert <= 1024. One block. A pair whose id is < 0 (a skip slot, moe_exec.h)
 * is in no tile: nothing computes or writes its rows. */
int32_t cuda_expert_max_tiles(int32_t n_pairs, int32_t n_expert, int32_t tile);
int cuda_expert_route(const int32_t *ids, int32_t n_pairs, int32_t n_expert, int32_t tile, int32_t *order,
                      int32_t *tiles, int32_t *n_tiles, cudaStream_t s, guild_err_t *err);

/* cuda_quantize(act_type, x, ldx, dst, dst_stride, n, n_rows) and cuda_expert_route(...), the same bytes: in the
 * route's launch when the rows are at most CUDA_ROUTE_QUANTIZE_BLOCKS activation blocks in all (a decode step's),
 * else the two launches. */
#define CUDA_ROUTE_QUANTIZE_BLOCKS 64
int cuda_expert_route_quantize(const int32_t *ids, int32_t n_pairs, int32_t n_expert, int32_t tile, int32_t *order,
                               int32_t *tiles, int32_t *n_tiles, guild_type_t act_type, const float *x, int64_t ldx,
                               void *dst, size_t dst_stride, int64_t n, int32_t n_rows, cudaStream_t s,
                               guild_err_t *err);

/* For each pair p of each tile (grid sized for max_tiles; blocks past *n_tiles exit) and each row r < nrows of
 * the tile's expert e (matrix at w + e * expert_stride, rows row_stride apart, n elements of `type`):
 *   w_up NULL: out[p * ldo + r] = dot(row r of w_e, act row p / act_div)
 *   else:      out[p * ldo + r] = silu(g) * u, g and u those dots for w_e and w_up_e (cuda_swiglu's operations)
 * dot is quant_vec_dot_ref bit for bit (cuda_matmul's arithmetic); act rows (act_stride bytes apart) are in the
 * type's dot type. tile: 1, 2, 4 or 8, as given to cuda_expert_route; or CUDA_EXPERT_MMA_TILE for a type that
 * cuda_expert_mma_supported(): the int8 tensor-core kernel (sm_80+), the same bits, for many pairs per expert
 * (its act rows must be well-formed blocks: Q8_K bsums the sums of their qs). */
#define CUDA_EXPERT_MMA_TILE 64
bool cuda_expert_mma_supported(guild_type_t type);
/* Whether the mma path's products of these operands take its staged kernel (expert_mma.cu: Q4_K, Q5_K and Q6_K,
 * rows and blocks aligned for its copies, the device's shared memory granted): routed (dense false; w_up NULL for
 * plain products) or cuda_matmul's (dense: w_up NULL, expert_stride 0), which takes it from 1024 tokens. False
 * (and the mma path's other kernel, the same bits) otherwise. */
bool cuda_expert_mma_staged(guild_type_t type, int64_t n, const void *w, const void *w_up, size_t expert_stride,
                            size_t row_stride, const void *act, size_t act_stride, bool dense);
int cuda_expert_matmul(guild_type_t type, int64_t n, int64_t nrows, const void *w, const void *w_up,
                       size_t expert_stride, size_t row_stride, const void *act, size_t act_stride, int32_t act_div,
                       const int32_t *order, const int32_t *tiles, const int32_t *n_tiles, int32_t max_tiles,
                       int32_t tile, float *out, int64_t ldo, cudaStream_t s, guild_err_t *err);

/* The products of a few-token step's pairs without a route (gpu-worker/dense/cuda/expert_pair.cu): for each pair
 * p < pairs whose lids[p] is an expert e of the n_local at w (e < 0 or >= n_local: skipped, its rows untouched)
 * and each row r < nrows, out[p * ldo + r] = cuda_expert_matmul's value for a tile of that one pair, the pair's
 * activation row (float row p / act_div of x, ldx floats apart) quantized to the type's dot type as cuda_quantize
 * does: the same bits as cuda_quantize + cuda_expert_route + cuda_expert_matmul with tiles of 1. rows_per_warp:
 * 1, 2, 4, or 0 (the kernel's choice); early: the pairs' ids were written before the launch before this one (its
 * blocks prefetch their rows before they wait for it). cuda_expert_pairs_take: the kernel takes rows of n of the
 * type (a dp4a type whose quantized row fits its shared memory). */
bool cuda_expert_pairs_take(guild_type_t type, int64_t n);
int cuda_expert_pairs(guild_type_t type, int64_t n, int64_t nrows, const void *w, const void *w_up,
                      size_t expert_stride, size_t row_stride, const float *x, int64_t ldx, int32_t act_div,
                      const int32_t *lids, int32_t n_local, int32_t pairs, float *out, int64_t ldo,
                      int32_t rows_per_warp, bool early, cudaStream_t s, guild_err_t *err);

/* cuda_expert_pairs' products on int8 tensor cores (gpu-worker/dense/cuda/expert_pair_mma.cu), the pairs of each
 * expert grouped in the launch: the same arguments and, for every pair, the same bits as cuda_expert_pairs (a
 * pair's floats do not depend on the pairs it is grouped with). pairs <= 4096. shape: NULL, or fields 0, for the
 * kernel's choice. The kernel has Q4_K, Q5_K, Q6_K, IQ4_XS and Q8_0. cuda_expert_pairs_mma_take: the rule of a
 * step of ntok tokens, CUDA_EXPERT_PAIRS_MMA_MIN_TOK .. _MAX_TOK tokens (fewer tokens' pairs share few experts)
 * of the types timed faster there (Q4_K, Q6_K) whose quantized rows of n fit its shared memory; other steps and
 * types take cuda_expert_pairs. */
#define CUDA_EXPERT_PAIRS_MMA_MIN_TOK 4
#define CUDA_EXPERT_PAIRS_MMA_MAX_TOK 16
typedef struct cuda_pairs_mma_shape {
    int32_t warps;  /* warps a block, 16 weight rows each: 2, 4 or 8 */
    int32_t tile;   /* pairs of one expert a block (the mma's columns): 8 or 16 */
    int32_t unroll; /* the loop over a row's blocks unrolled 1 or 2 times (direct loads) */
    int32_t stages; /* 1: fragments loaded from global memory as the products need them; 2-4 (8 pairs a block):
                     * each warp's rows copied to shared memory by cp.async, that many blocks in its ring (the direct
                     * loads where the matrices are not 16-byte aligned) */
    int32_t l2;     /* the staged form's L2 prefetch of the block's rows before the activations: 1 none, 2 as the
                     * direct loads' (the down product's before the wait: always) */
} cuda_pairs_mma_shape_t;
bool cuda_expert_pairs_mma_take(guild_type_t type, int64_t n, int32_t ntok);
int cuda_expert_pairs_mma(guild_type_t type, int64_t n, int64_t nrows, const void *w, const void *w_up,
                          size_t expert_stride, size_t row_stride, const float *x, int64_t ldx, int32_t act_div,
                          const int32_t *lids, int32_t n_local, int32_t pairs, float *out, int64_t ldo,
                          const cuda_pairs_mma_shape_t *shape, bool early, cudaStream_t s, guild_err_t *err);

/* gpt-oss's experts (gpu-worker/dense/cuda/expert_oai.cu), for the pairs p < n_pairs whose ids[p] >= 0 (the
 * others untouched): h[p][r] = swiglu_oai(h[p][r] + gate_b[e][r], u[p][r] + up_b[e][r]) with e = ids[p]
 * (model_swiglu_oai: alpha, limit; biases [n_expert][n_ff]); y[p][r] += bias[e][r] (bias [n_expert][n]). */
int cuda_expert_swiglu_oai(float *h, const float *u, const int32_t *ids, int32_t n_pairs, int64_t n_ff,
                           const float *gate_b, const float *up_b, float alpha, float limit, cudaStream_t s,
                           guild_err_t *err);
int cuda_expert_add_bias(float *y, const int32_t *ids, int32_t n_pairs, int64_t n, const float *bias, cudaStream_t s,
                         guild_err_t *err);

/* y[p][0..n_embd) = src[p][..] for the pairs p < n_pairs whose ids[p] >= 0 (rows of y [n_pairs][n_embd] the other
 * side of a split layer computed); the other rows of y untouched. */
int cuda_expert_merge(float *y, const float *src, const int32_t *ids, int32_t n_pairs, int64_t n_embd,
                      cudaStream_t s, guild_err_t *err);

/* Restores plain rows in place in n_experts matrices of nrows rows of row_bytes (a whole number of blocks) that
 * are packed in `layout` (core/kern/pack_layout.h), matrix i at base + i * expert_stride (16-byte aligned): the
 * bytes kern_unpack gives. nrows a multiple of 16; 16 rows must fit in a block's shared memory. table: the
 * gather table of cuda_expert_unpack_table for this layout and row_bytes (NULL: each byte's place computed on
 * the device, much slower). */
int cuda_expert_unpack(const kern_pack_layout_t *layout, const uint32_t *table, void *base, size_t expert_stride,
                       int32_t n_experts, int64_t nrows, size_t row_bytes, cudaStream_t s, guild_err_t *err);

/* The gather table of rows of row_bytes packed in `layout`: the packed place of each plain byte of a 16-row group
 * (kern_pack_packed_offset), then for each plain 4-byte word the packed word it is when its bytes are one packed
 * word in order; 5 * 16 * row_bytes bytes of device memory (cuda_free), added to *bytes. -1 with a message on a
 * row size that is not whole blocks or on device memory. */
int cuda_expert_unpack_table(const kern_pack_layout_t *layout, size_t row_bytes, uint32_t **out, size_t *bytes,
                             guild_err_t *err);

/* Which part computes each expert of a layer: rank[e] >= 0 its place among the device's experts (parts hold
 * consecutive ranks), < 0 the CPU side's. Passed by value to the kernel (no copy to keep alive). */
#define CUDA_RANK_TABLE_MAX 1024
typedef struct cuda_rank_table {
    int16_t rank[CUDA_RANK_TABLE_MAX];
} cuda_rank_table_t;

/* out[p] for the n_pairs ids (ids < 0 stay skip slots, -1): lo >= 0: rank(ids[p]) - lo when that rank is in
 * [lo, hi) (a part's local expert ids), else -1; lo < 0: ids[p] when its rank is < 0 (the CPU side's), else -1.
 * n_expert <= CUDA_RANK_TABLE_MAX. */
int cuda_expert_ids_map(const int32_t *ids, int32_t n_pairs, const cuda_rank_table_t *table, int32_t n_expert,
                        int32_t lo, int32_t hi, int32_t *out, cudaStream_t s, guild_err_t *err);

/* The tiles of experts [lo, hi) of a tile table that cuda_expert_route made (tiles, *n_tiles: device), their
 * expert ids made local (e - lo), into out (16-byte aligned, room for every tile of the range) and *n_out
 * (device): one device part's tiles out of one routing of the layer's device ranks, in any order (each tile's
 * products are its own). One block. */
int cuda_expert_tiles_range(const int32_t *tiles, const int32_t *n_tiles, int32_t lo, int32_t hi, int32_t *out,
                            int32_t *n_out, cudaStream_t s, guild_err_t *err);

/* out[p] = ids[p] where lids[p] >= 0 (the pairs of one device part, cuda_expert_ids_map), else -1: the part's
 * pairs with their experts' own ids (gpt-oss's biases are indexed by them). */
int cuda_expert_ids_keep(const int32_t *ids, const int32_t *lids, int32_t n_pairs, int32_t *out, cudaStream_t s,
                         guild_err_t *err);

/* ---- attention ------------------------------------------------------------------------------------------ */

/* What attention adds to the causal softmax (gpt-oss's GQA options); NULL or zeros: nothing. */
typedef struct cuda_attn_ext {
    int32_t window;      /* > 0: the query at position p sees keys p - window + 1 .. p only (sliding window) */
    const float *sinks;  /* device [n_head] or NULL: query head h's sink logit joins its softmax (it weighs no
                            value), as gpu-worker/dense/cpu/attention.c */
} cuda_attn_ext_t;

/* What a decode step's attention does in its own launch where it can (cuda_attention_decode_dyn; NULL: nothing). */
typedef struct cuda_attn_fuse {
    unsigned int *done;      /* device [n_head_kv * CUDA_DECODE_ROWS], zeros, or NULL: the KV-head kernel merges a
                                row's splits in its launch (the same bits as its merge kernel), the counters back at
                                0 after each launch */
    guild_type_t quant_type; /* with quant_dst: the output rows also written quantized to this type (q8_0, q8_1, */
    void *quant_dst;         /* q8_K), row t at quant_dst + t * quant_stride: cuda_quantize's bytes (in the */
    size_t quant_stride;     /* attention's launch where it can, else by cuda_quantize after it) */
} cuda_attn_fuse_t;

/* Causal attention of n_tok query rows (q: [n_tok][n_head * head_dim]) at positions kv0 .. kv0 + n_tok - 1
 * over cache rows 0 .. kv0 + t of one layer (kv_type F16 or F32, [n_ctx][n_head_kv * head_dim] each for K and V;
 * rows of the batch already stored). out: [n_tok][n_head * head_dim]. Query head h reads KV head
 * h / (n_head / n_head_kv). head_dim: 32, 64, 128 or 256.
 *
 * decode: 8 lanes per key, keys split over blocks (flash-decoding); for few query rows. When the query heads per
 * KV head are a power of two <= 16 (and the caches 16-byte aligned), a block serves all the query heads of a KV
 * head and reads its keys once (through shared memory); otherwise (or with _per_head, for tests and timing) a
 * block serves one query head. The two differ in summation order only. ext (NULL: none): a sliding window
 * (splits cover only the keys some row sees) and sinks (joined where the output is written or merged).
 * scratch: cuda_attention_decode_scratch(...) bytes of device memory (may be 0: then no split). */
size_t cuda_attention_decode_scratch(int32_t n_tok, int32_t n_head, int32_t head_dim, int32_t n_ctx);

/* Batch invariance: the decode kernels plan each row's key splits from that row's own position, and with
 * cuda_attention_decode_scratch(n, ...) bytes of scratch a batch of up to min(n, CUDA_DECODE_ROWS) rows gets
 * the full split cap, so each of its rows is the same bits as when it runs alone (after the same cache rows).
 * The CUDA backend takes this kernel for batches up to CUDA_DECODE_ROWS rows (a speculative verify step of
 * up to 16 drafts and its pending token, 17 rows, is one of them). */
#define CUDA_DECODE_ROWS 32
int cuda_attention_decode(float *out, const float *q, guild_type_t kv_type, const void *k_cache, const void *v_cache,
                          int32_t n_tok, int32_t kv0, int32_t n_head, int32_t n_head_kv, int32_t head_dim, float scale,
                          const cuda_attn_ext_t *ext, void *scratch, size_t scratch_bytes, cudaStream_t s,
                          guild_err_t *err);
int cuda_attention_decode_per_head(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                   const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head, int32_t n_head_kv,
                                   int32_t head_dim, float scale, const cuda_attn_ext_t *ext, void *scratch,
                                   size_t scratch_bytes, cudaStream_t s, guild_err_t *err);

/* The same with kv0 read from the device int *kv0, which may hold at most kv0_max (the grid is sized for it;
 * blocks past the split count of the actual length exit). Same splits, so the same bits, as a direct call; fuse
 * (may be NULL): the merge and the output's quantization in the attention's launch, in the launch form of
 * cuda_set_attn_form. Contract: no kernel writes *kv0 while the launches before this one on the stream may still
 * run: the form's `early` reads it before waiting on them (programmatic dependent launch). The backend's *kv0 is
 * the step's start copy (b->d_pos, the cudaMemcpyAsync that opens every step in cuda_backend.c and cuda_mtp.c,
 * before the step's first kernel: every kernel of the step starts after it has ended). */
int cuda_attention_decode_dyn(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                              const void *v_cache, int32_t n_tok, const int32_t *kv0, int32_t kv0_max, int32_t n_head,
                              int32_t n_head_kv, int32_t head_dim, float scale, const cuda_attn_ext_t *ext,
                              void *scratch, size_t scratch_bytes, const cuda_attn_fuse_t *fuse, cudaStream_t s,
                              guild_err_t *err);

/* The decode attention on tensor cores (attn_decode.cu's attn_decode_cl_kernel), process-wide, on unless turned
 * off (--cuda-off attn-mma; tests of the FMA forms): F16 caches, heads of 64 or 128, up to 16 query heads a KV head
 * (launches of the per-head kernel, other caches and shapes keep the FMA forms). A cluster of blocks a (KV head, row)
 * merges the row's splits in its launch (no scratch, no counters, no launch form). Its rounding differs from theirs
 * (the prefill kernel's tensor-core arithmetic); a row's bits are the same in any batch. Call it outside any stream
 * capture (it sets the kernel's shared memory once). */
void cuda_set_attn_mma(bool on);

/* The launch form of the decode attention's KV-head kernel where it merges a row's splits in its launch
 * (cuda_attention_decode_dyn and _seqs given fuse->done; other launches keep a block a split, the lengths read after
 * the wait, no prefetch). Every form computes each split as a block of its own would (the same tiles, the same
 * online softmax, its partial to the same scratch slot) and merges as the merge kernel: the same bits. */
typedef struct cuda_attn_form {
    int32_t waves;         /* > 0: the grid along the splits cut to G = max(1, floor(waves x the blocks the device
                              holds at once / (KV heads x rows))), block z of a KV head and row computing splits z,
                              z + G, ... (a captured graph's grid is sized for its context: most of a block a
                              split's are empty); 0: a block a split */
    bool early;            /* the row lengths read before the wait on the kernel before (they are the step's start
                              copy: cuda_attention_decode_dyn's contract), so that blocks without a split leave at
                              once instead of holding an SM until that kernel ends */
    int32_t prefetch_rows; /* with early: launches of at most this many rows ask their blocks' keys and values into
                              L2 before the wait (0: never) */
    int32_t row_blocks;    /* tests: > 0 caps the blocks a KV head and row (1: one block computes every split) */
} cuda_attn_form_t;
/* one wave: a grid past the blocks the device holds leaves its empty blocks (each reads its row's length before it
 * leaves) waiting for a slot in rounds, which costs most where few of the blocks have a split (a graph sized for a
 * long context, a few rows of short ones); two waves never measured faster alone (bench/results/attn35-*) */
#define CUDA_ATTN_WAVES_DEFAULT 1
#define CUDA_ATTN_PREFETCH_ROWS_DEFAULT 4

/* The default form: waves CUDA_ATTN_WAVES_DEFAULT, early, prefetch_rows CUDA_ATTN_PREFETCH_ROWS_DEFAULT. */
cuda_attn_form_t cuda_attn_form_default(void);
/* Sets the form of the launches that follow, process-wide (NULL: the default); the backend sets it from
 * cuda_config_t (--cuda-off attn-grid,attn-early,attn-prefetch), tests and timings set others. Negative counts read
 * as 0. With waves, it asks the device how many blocks it holds (once a process): call it outside stream capture
 * (a first launch would ask otherwise, maybe inside a capture). */
void cuda_set_attn_form(const cuda_attn_form_t *form);
cuda_attn_form_t cuda_attn_form(void);
/* A timeline of the launches that follow (timing programs only; NULL: none, the default), process-wide: the fused
 * decode attention of 128-wide heads, 8 query heads a KV head or fewer, F16 caches (attn_decode_gqa_kernel) writes
 * CUDA_ATTN_TL_STAMPS %globaltimer readings (ns) a block (cuda_timeline.h) to stamps, block (x, y, z) of its grid
 * (KV head, row, block along the splits) at [((z rows + y) KV heads + x) CUDA_ATTN_TL_STAMPS]; a stamp a block did
 * not reach keeps its old value (clear the buffer). Other launches take no timeline. Each launch captured in a
 * graph keeps the pointer set when it was captured. */
void cuda_set_attn_timeline(unsigned long long *stamps);

/* A timeline of the fused router's cluster form (router_cluster_kernel; timing programs only; NULL: none, the
 * default), process-wide, as cuda_set_attn_timeline: CUDA_ROUTER_TL_STAMPS %globaltimer readings (ns) a block
 * (cuda_timeline.h), block (x, y) of its grid (block of the cluster, token) at [(y CB + x) CUDA_ROUTER_TL_STAMPS]. */
void cuda_set_router_timeline(unsigned long long *stamps);

/* Causal attention as cuda_attention_decode over caches of the block formats (gpu-worker/dense/kv_format.h): keys in
 * kt, values in vt (Q8_0 or Q4_0; v_rot: Q8_0 keys and Q4_0 values rotated head by head, k8v4), read as blocks. A
 * row's keys are cut into splits by its own position and the splits' partial softmax states merged in split order: a
 * row's output is the same bits in any batch split, with or without scratch. q8_0, q4_0 and k8v4 with head dims 64,
 * 128 or 256, 1 to 8 query heads a KV head (a power of two) and caches aligned to 8 bytes (4 for head dim 64) are read
 * by a block per KV head that dequantizes each tile of keys once for its query heads; other shapes, and _per_head
 * (tests and timing), by a block per query head: the two differ in summation order. scratch (may be NULL): with at
 * least cuda_attention_decode_scratch(n_tok, n_head, head_dim, ...) bytes the splits run in parallel blocks and a
 * second kernel merges them (flash-decoding); else one block per (head, row) walks them. kv0_dev NULL: kv0 is
 * the cache length; else it is read from the device and kv0 is the largest value it may hold (the grid is sized for
 * it). ext: as for decode. head_dim: a multiple of 32 up to 256 (a power of two with v_rot). The CPU's
 * cpu_attention_head_cache within float rounding. */
int cuda_attention_blocks(float *out, const float *q, guild_type_t kt, guild_type_t vt, bool v_rot,
                          const void *k_cache, const void *v_cache, int32_t n_tok, int32_t kv0, const int32_t *kv0_dev,
                          int32_t n_head, int32_t n_head_kv, int32_t head_dim, float scale, const cuda_attn_ext_t *ext,
                          void *scratch, size_t scratch_bytes, cudaStream_t s, guild_err_t *err);
int cuda_attention_blocks_per_head(float *out, const float *q, guild_type_t kt, guild_type_t vt, bool v_rot,
                                   const void *k_cache, const void *v_cache, int32_t n_tok, int32_t kv0,
                                   const int32_t *kv0_dev, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                   float scale, const cuda_attn_ext_t *ext, void *scratch, size_t scratch_bytes,
                                   cudaStream_t s, guild_err_t *err);

/* Causal prefill attention over the block-format caches on tensor cores (attn_blocks_mma.cu): kt, vt and v_rot of
 * q8_0, q4_0 or k8v4 (kv_format.h), head dimension 64 or 128, kv0 the cache length before row 0 (from the host:
 * the grid follows the batch, as cuda_attention_prefill's). The integers of the blocks are the mma operands and
 * the scales are applied in f32 (Q and P split hi + lo as in cuda_attention_prefill_mma): cpu_attention_head_cache
 * within the attention tolerance, not bit for bit, and not the bits of cuda_attention_blocks (its tiles follow the
 * batch). -1 with a message unless cuda_attention_blocks_mma_takes (4-byte aligned caches, 8-byte aligned q and
 * out). */
bool cuda_attention_blocks_mma_takes(guild_type_t kt, guild_type_t vt, bool v_rot, int32_t head_dim, const float *out,
                                     const float *q, const void *k_cache, const void *v_cache);
int cuda_attention_blocks_mma(float *out, const float *q, guild_type_t kt, guild_type_t vt, bool v_rot,
                              const void *k_cache, const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head,
                              int32_t n_head_kv, int32_t head_dim, float scale, const cuda_attn_ext_t *ext,
                              cudaStream_t s, guild_err_t *err);

/* ---- several sequences' rows in one launch (a decode step of several sessions) ----
 * A batch of up to CUDA_SEQ_ROWS rows of several sequences, each sequence's rows adjacent (a group: the backend's
 * cuda_backend_t.grp_*): row t of the batch belongs to sequence seq[t], whose layer caches lie at the launch's
 * cache addresses (sequence 0's) + seq[t] * k_seq (v_seq) bytes, and to group grp[t], whose sequence held
 * len[grp[t]] positions (device) at the step's start; it is the idx[t]-th of its group's rows, so at position
 * len[grp[t]] + idx[t]. The table goes by value in the kernels' parameters (a captured graph keeps it). Each row
 * does what its group's own launch does for it: its position's rotation and cache cells, its keys split by its own
 * position (the decode attention needs the full split cap for the batch: the scratch of
 * cuda_attention_decode_scratch for CUDA_DECODE_ROWS rows), its merge and quantization: the same bits. n = 0: no
 * table (the entry points without _seqs). */
#define CUDA_SEQ_ROWS CUDA_DECODE_ROWS
typedef struct cuda_seq_rows {
    const int32_t *len;  /* device [groups]: each group's cache length at the step's start */
    int64_t k_seq, v_seq; /* bytes from one sequence's caches to the next's */
    int32_t n;           /* rows (<= CUDA_SEQ_ROWS), 0: none */
    int32_t seq[CUDA_SEQ_ROWS];
    uint8_t grp[CUDA_SEQ_ROWS], idx[CUDA_SEQ_ROWS];
} cuda_seq_rows_t;

/* cuda_qk_prepare, cuda_rope_dyn, cuda_kv_store_dyn and cuda_kv_store_blocks for the rows of a table (n_tok =
 * rows->n): positions and caches by row. */
int cuda_qk_prepare_seqs(float *q, float *k, const float *v, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                         const float *q_norm, const float *k_norm, float eps, int32_t n_rot, bool neox,
                         const float *cs, const cuda_seq_rows_t *rows, guild_type_t kv_type, void *k_cache,
                         void *v_cache, cudaStream_t s, guild_err_t *err);
int cuda_rope_seqs(float *x, int64_t ldx, int32_t n_heads, int32_t head_dim, int32_t n_rot, bool neox,
                   const float *cs, const cuda_seq_rows_t *rows, cudaStream_t s, guild_err_t *err);
int cuda_kv_store_seqs(guild_type_t kv_type, void *k_cache, void *v_cache, const float *k, const float *v,
                       int64_t kv_dim, const cuda_seq_rows_t *rows, cudaStream_t s, guild_err_t *err);
int cuda_kv_store_blocks_seqs(guild_type_t kt, guild_type_t vt, bool v_rot, void *k_cache, void *v_cache,
                              const float *k, const float *v, int64_t kv_dim, int32_t head_dim,
                              const cuda_seq_rows_t *rows, cudaStream_t s, guild_err_t *err);

/* cuda_attention_decode_dyn and cuda_attention_blocks (kv0_dev given) for the rows of a table: the grid sized for
 * caches of n_ctx positions. Each row the bits of its group's own launch. decode: -1 unless the scratch gives the
 * full split cap for rows->n rows; rows->len under cuda_attention_decode_dyn's contract for *kv0 (no kernel writes
 * it during the step: the backend's is the step's start copy). */
int cuda_attention_decode_seqs(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                               const void *v_cache, const cuda_seq_rows_t *rows, int32_t n_ctx, int32_t n_head,
                               int32_t n_head_kv, int32_t head_dim, float scale, const cuda_attn_ext_t *ext,
                               void *scratch, size_t scratch_bytes, const cuda_attn_fuse_t *fuse, cudaStream_t s,
                               guild_err_t *err);
int cuda_attention_blocks_seqs(float *out, const float *q, guild_type_t kt, guild_type_t vt, bool v_rot,
                               const void *k_cache, const void *v_cache, const cuda_seq_rows_t *rows, int32_t n_ctx,
                               int32_t n_head, int32_t n_head_kv, int32_t head_dim, float scale,
                               const cuda_attn_ext_t *ext, void *scratch, size_t scratch_bytes, cudaStream_t s,
                               guild_err_t *err);

/* Multi-head latent attention's absorbed form (deepseek2): for each row t < n_tok and head h, the softmax over
 * positions j <= *kv0 + t of (qk[t][h] . cache[j]) * scale, weighting cache[j][0, R): lat[t][h][0, R). qk:
 * [n_tok][n_head][RR] floats (the latent-space query, then the rotated part); cache: one layer's [n_ctx][RR] of
 * kv_type (the latent, then the rotated key part); *kv0 + n_tok <= n_ctx; R <= 1024. The CPU's
 * cpu_attention_head_kv within float rounding. An F16 cache with R = 512, RR = 576 (DeepSeek-V2/V3, Kimi-K2) or
 * 64, 96 runs on tensor cores (cuda_mla_attention_mma), batches of at most CUDA_MLA_SPLIT_ROWS rows with their
 * positions split by a plan fixed by n_ctx, in scratch (cuda_mla_attention_scratch bytes; NULL: unsplit); others
 * (an F32 cache: the reference-precision path) on CUDA cores, online softmax over chunks of positions. */
#define CUDA_MLA_SPLIT_ROWS CUDA_DECODE_ROWS /* the batches backend.h keeps batch-invariant */
size_t cuda_mla_attention_scratch(int32_t n_head, int32_t R, int32_t n_ctx);
int cuda_mla_attention(float *lat, const float *qk, guild_type_t kv_type, const void *cache, int32_t n_tok,
                       const int32_t *kv0, int32_t n_ctx, int32_t n_head, int32_t R, int32_t RR, float scale,
                       void *scratch, size_t scratch_bytes, cudaStream_t s, guild_err_t *err);
bool cuda_mla_attention_mma_takes(guild_type_t kv_type, int32_t R, int32_t RR, const float *lat, const float *qk,
                                  const void *cache);
int cuda_mla_attention_mma(float *lat, const float *qk, const void *cache, int32_t n_tok, const int32_t *kv0,
                           int32_t n_ctx, int32_t n_head, int32_t R, int32_t RR, float scale, void *scratch,
                           size_t scratch_bytes, cudaStream_t s, guild_err_t *err);

/* prefill: tiles of query rows against tiles of keys in shared memory, online softmax (flash attention).
 * Runs the tensor-core kernel (below) when it takes the arguments and n_tok >= CUDA_ATTN_MMA_MIN_ROWS, the
 * FP32 one otherwise (always for an F32 cache: the reference-precision path). ext: as for decode. */
int cuda_attention_prefill(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                           const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head, int32_t n_head_kv,
                           int32_t head_dim, float scale, const cuda_attn_ext_t *ext, cudaStream_t s,
                           guild_err_t *err);

#define CUDA_ATTN_MMA_MIN_ROWS 16

/* The two kernels of cuda_attention_prefill, same arguments and causal semantics, for tests and benchmarks.
 * _fp32: CUDA-core FP32 arithmetic, any supported type and head dimension. _mma: mma.sync f16 operands with
 * Q and P split hi + lo (about 2^-22 relative), f32 accumulation; -1 with a message unless
 * cuda_attention_prefill_mma_takes (F16 cache, head dimension 64 or 128, 16-byte aligned caches, 8-byte
 * aligned q and out). Q rows and P are scaled by powers of two to stay within f16's normal range. */
int cuda_attention_prefill_fp32(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head, int32_t n_head_kv,
                                int32_t head_dim, float scale, const cuda_attn_ext_t *ext, cudaStream_t s,
                                guild_err_t *err);
int cuda_attention_prefill_mma(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                               const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head, int32_t n_head_kv,
                               int32_t head_dim, float scale, const cuda_attn_ext_t *ext, cudaStream_t s,
                               guild_err_t *err);
bool cuda_attention_prefill_mma_takes(guild_type_t kv_type, int32_t head_dim, const float *out, const float *q,
                                      const void *k_cache, const void *v_cache);

/* ---- the gated delta net and the attention output gate (gdn.cu; gpu-worker/dense/cpu/attn_gdn.c's steps) --- */

/* qkv[t][0..CH) (n rows) through the causal convolution, one row after the other, each channel's last K-1 inputs
 * in state[ch][0..K-1) (updated), taps w[ch][0..K) oldest first; then silu. The CPU's float order. ring (NULL:
 * none): the state after row t is also written at ring + t * ring_row (backend_options_t.rollback). */
int cuda_gdn_conv(float *qkv, int64_t CH, int32_t n, const float *w, float *state, int32_t K, float *ring,
                  int64_t ring_row, cudaStream_t s, guild_err_t *err);

/* Row t of qkv: its 2*NK key heads of DK L2-normalised (x / max(|x|, eps), the squares summed in double), the NK
 * query heads also times 1/sqrt(DK); beta[t][h] = sigmoid(beta logit), g[t][h] = softplus(alpha + dt[h]) * A[h]
 * from ba[t] (split: the NV betas then the NV alphas; else per key head its value heads' betas then alphas). */
int cuda_gdn_prep(float *qkv, int64_t CH, const float *ba, float *beta, float *g, const float *dt, const float *A,
                  int32_t n, int32_t DK, int32_t NK, int32_t NV, bool split, float eps, cudaStream_t s,
                  guild_err_t *err);

/* The delta rule over the n rows in order, per value head h (its key head h % NK when tiled, else h / (NV/NK)),
 * state[h] a DK x DK matrix (row r: value element r) updated in place; o[t][h*DK + r] = the head's output
 * RMS-normed by norm_w (cpu_rmsnorm's order) times silu(z[t][h*DK + r]). DK <= 1024. ring (NULL: none): the
 * state after row t is also written at ring + t * ring_row, as state is laid out (backend_options_t.rollback). */
int cuda_gdn_delta(const float *qkv, int64_t CH, const float *beta, const float *g, float *state, const float *z,
                   const float *norm_w, float *o, int64_t IN, int32_t n, int32_t DK, int32_t NK, int32_t NV,
                   bool tiled, float eps, float *ring, int64_t ring_row, cudaStream_t s, guild_err_t *err);

/* ---- the gated delta net's chunkwise parallel form for prefill (gdn_chunk.cu) ---- */

/* Rows per chunk of the parallel form, and the fewest rows of a batch for which the backend takes it over
 * cuda_gdn_delta's one row at a time: above CUDA_DECODE_ROWS, so that batches up to it stay batch-invariant (each
 * row the bits of that row alone: the one-row form is). */
#define CUDA_GDN_CHUNK 64
#define CUDA_GDN_CHUNK_MIN_ROWS (CUDA_DECODE_ROWS + 1)

/* True when heads of DK take the chunked form (DK <= 128 and whole groups of its state rows). */
bool cuda_gdn_chunk_fits(int32_t DK);

/* Bytes of the scratch cuda_gdn_chunk needs for batches of up to n rows. */
size_t cuda_gdn_chunk_scratch(int32_t n, int32_t DK, int32_t NV);

/* cuda_gdn_delta's result by the chunkwise (WY) form of the gated delta rule: the same state and outputs within
 * float rounding (other sums in another order), the outputs RMS-normed and gated alike (the norm's squares
 * summed in float). scratch: cuda_gdn_chunk_scratch(n, DK, NV) bytes. -1 when !cuda_gdn_chunk_fits(DK). */
int cuda_gdn_chunk(const float *qkv, int64_t CH, const float *beta, const float *g, float *state, const float *z,
                   const float *norm_w, float *o, int64_t IN, int32_t n, int32_t DK, int32_t NK, int32_t NV,
                   bool tiled, float eps, float *scratch, cudaStream_t s, guild_err_t *err);

/* Gated attention: each head's query and gate out of the projection's rows qg[t] (2 * n_head * head_dim: per
 * head the query, then the gate) into q[t] and gate[t] (n_head * head_dim). Copies: the same bits. */
int cuda_qg_split(const float *qg, float *q, float *gate, int32_t n, int32_t n_head, int32_t head_dim,
                  cudaStream_t s, guild_err_t *err);

/* x[i] *= sigmoid(gate[i]) for i < total (sigmoid = 1 / (1 + expf(-g))). */
int cuda_sigmoid_mul(float *x, const float *gate, int64_t total, cudaStream_t s, guild_err_t *err);

/* The decode step's clock (cuda_step_clock.h): *slot = the GPU's global timer in ns once the kernels before it on
 * the stream have finished; slot is a device address (of mapped host memory, so the host reads it after the
 * step's synchronisation without a copy). */
int cuda_clock_mark(uint64_t *slot, cudaStream_t s, guild_err_t *err);

#ifdef __cplusplus
}
#endif

#endif
