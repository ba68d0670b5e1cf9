/* cuda_router_topk: cpu_router_softmax_grouped, one warp per token: softmax (sum in double), with expert groups
 * the experts of all but the best groups masked (router_groups.cuh), k passes of a warp argmax (ties to the lowest
 * expert id, as the CPU's scan), optional renormalisation summed in slot order, scale; with counts, each chosen
 * expert counted (cuda_route_count's counters, which then need no launch of their own).
 *
 * cuda_router_fused is the router's F32 product (matmul_plain.cuh's order of operations, cuda_matmul's bits) and
 * cuda_router_topk in one launch, for a decode step's few tokens: the product's blocks write the logits, and the
 * block that finishes last (a device counter) chooses the experts of every token from them: the same softmax, and
 * for up to RF_RANK_MAX experts the passes' choice by ranks, every expert's computed at once (the passes are a
 * chain of k warp reductions; the ranks name the same experts in the same slots). Several tokens go one a row of
 * blocks (blockIdx.y), each row with its own counter and its own last block: every block's work is one token's
 * whatever the batch (blocks of 2 or 4 tokens measured far slower: bench/results/router16-h200-2026-12-03-s29.md),
 * and each token takes the same operations in the same order as alone (batch invariance). Where thread block
 * clusters apply (sm_90, up to RC_EXPERTS_MAX experts, a row of one chunk; cuda_set_router_cluster), a token's blocks
 * are one cluster instead, whose first block gets the logits through distributed shared memory behind the cluster's
 * hardware barrier: no counter, no fence, no trip of the logits through L2 (router_cluster_kernel). A lone token's
 * cluster launch with the norm may also publish the token to the MoE exchange (router_publish_kernel, the exchange's
 * device code in xchg_dev.cuh): the launch of the exchange's own publish kernel saved. */
#include <atomic>

#include "gpu-worker/dense/cuda/cluster.cuh"
#include "gpu-worker/dense/cuda/residual.cuh"
#include "gpu-worker/dense/cuda/rmsnorm_row.cuh"
#include "gpu-worker/dense/cuda/router_groups.cuh"
#include "gpu-worker/dense/cuda/xchg_dev.cuh"

#define ROUTER_WARPS 4

/* The softmax of one token's logits l[0..n_expert) (read once) into p (n_expert + G floats of shared memory), the
 * sum in double, lane order then the warp's butterfly; with expert groups the experts of all but the best groups
 * masked (-INFINITY). */
static __device__ __forceinline__ void router_probs(const float *l, float *p, int n_expert, int G, int n_group_used,
                                                    int lane)
{
    float mx = -INFINITY;
    for (int e = lane; e < n_expert; e += WARP_SIZE)
        mx = fmaxf(mx, l[e]);
    mx = warp_max_f32(mx);
    double sum = 0;
    for (int e = lane; e < n_expert; e += WARP_SIZE) {
        const float pe = expf(l[e] - mx);
        p[e] = pe;
        sum += pe;
    }
    sum = warp_sum_f64(sum);
    const float inv = (float)(1.0 / sum);
    for (int e = lane; e < n_expert; e += WARP_SIZE)
        p[e] = p[e] * inv;
    __syncwarp();
    if (G) /* masked experts are -INFINITY: below a taken one (-1), never chosen */
        warp_mask_groups(p, n_expert, G, n_group_used, p + n_expert, lane);
}

/* Slot lane's expert my_id and weight my_w (lanes < k) out: optional renormalisation summed in slot order, scale;
 * with counts, each chosen expert counted. SMEM: the k weights also lie in shared memory at slot_w in slot order, and
 * the sum reads them there (each lane its own loads: no chain of shuffles), the same additions in the same order. */
template <bool SMEM = false>
static __device__ __forceinline__ void router_finish(int my_id, float my_w, int k, bool renorm, float scale,
                                                     int32_t *ids, float *w, unsigned long long *counts, int n_expert,
                                                     int lane, const float *slot_w = nullptr)
{
    if (renorm) {
        float wsum = 0.0f;
        if constexpr (SMEM) {
#pragma unroll 4
            for (int s = 0; s < k; s++)
                wsum = wsum + slot_w[s];
        } else {
            for (int s = 0; s < k; s++)
                wsum = wsum + __shfl_sync(FULL_MASK, my_w, s);
        }
        if (wsum < 6.103515625e-5f)
            wsum = 6.103515625e-5f;
        my_w = my_w / wsum;
    }
    if (scale != 0.0f && scale != 1.0f)
        my_w = my_w * scale;
    if (lane < k) {
        ids[lane] = my_id;
        w[lane] = my_w;
        if (counts && my_id >= 0 && my_id < n_expert)
            atomicAdd(&counts[my_id], 1ull);
    }
}

/* One token's choice by one warp: its logits l[0..n_expert) (read once), p: n_expert + G floats of shared
 * memory; ids/w: the token's k slots. */
static __device__ __forceinline__ void router_token(const float *l, float *p, int n_expert, int k, int G,
                                                    int n_group_used, bool renorm, float scale, int32_t *ids, float *w,
                                                    unsigned long long *counts, int lane)
{
    router_probs(l, p, n_expert, G, n_group_used, lane);

    /* Slot s ends in lane s. Probabilities are >= 0, so -1 marks an expert already taken. A NaN (non-finite
     * logits, which the non-finite check reports after the step) counts as -0.5: below every probability, above
     * a taken expert, so that every slot still names a valid expert and the step runs to its end. */
    float my_w = 0.0f;
    int my_id = 0;
    for (int s = 0; s < k; s++) {
        float bv = -1.0f;
        int bi = 0x7fffffff;
        for (int e = lane; e < n_expert; e += WARP_SIZE) {
            const float pe = isnan(p[e]) ? -0.5f : p[e];
            if (pe > bv) {
                bv = pe;
                bi = e;
            }
        }
#pragma unroll
        for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(FULL_MASK, bv, o);
            const int oi = __shfl_xor_sync(FULL_MASK, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (lane == s) {
            my_w = bv;
            my_id = bi;
        }
        if (lane == bi % WARP_SIZE)
            p[bi] = -1.0f;
        __syncwarp();
    }
    router_finish(my_id, my_w, k, renorm, scale, ids, w, counts, n_expert, lane);
}

static __global__ void router_kernel(const float *__restrict__ logits, int n_tok, int n_expert, int k, int G,
                                     int n_group_used, bool renorm, float scale, int32_t *ids, float *w,
                                     unsigned long long *counts)
{
    pdl_begin();
    extern __shared__ float probs_sh[];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int t = blockIdx.x * ROUTER_WARPS + warp;
    if (t >= n_tok)
        return;
    router_token(logits + (int64_t)t * n_expert, probs_sh + (size_t)warp * (n_expert + G), n_expert, k, G,
                 n_group_used, renorm, scale, ids + (int64_t)t * k, w + (int64_t)t * k, counts, lane);
}

/* The fused kernel reads a weight row in chunks of RF_CHUNK elements, a lane's RF_LANE of them (elements lane,
 * lane + 32, ...) loaded into registers together: one round trip a chunk instead of a chain of them. The first
 * chunk's loads come before pdl_begin (the weights are no kernel's output, cuda_common.cuh): they overlap the
 * kernel before (the norm that writes x). */
#define RF_LANE 64
#define RF_CHUNK (RF_LANE * WARP_SIZE)
/* Experts up to which the last block ranks every expert against all the others (one thread an expert, all
 * tokens); above it a warp's k argmax passes per token (router_token), whose cost grows as k n_expert / 32
 * instead of n_expert^2 / (32 ROUTER_WARPS). */
#define RF_RANK_MAX 256

/* router_probs, then router_token's rule that a NaN counts as -0.5, for the ranked forms (up to RF_RANK_MAX experts:
 * router_fused_kernel's choice and the cluster form's), the lane's logits held in registers: l read once and p
 * written once, where the two took three passes over shared memory after the first. The same operations in the same
 * order (the lane's experts in order, then the warp's butterfly), so the same bits; with expert groups the masking
 * and the NaN rule stay in their order, over p. */
static __device__ __forceinline__ void router_probs_reg(const float *l, float *p, int n_expert, int G,
                                                        int n_group_used, int lane)
{
    constexpr int NPL = RF_RANK_MAX / WARP_SIZE;
    float v[NPL];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < NPL; j++) {
        const int e = lane + j * WARP_SIZE;
        v[j] = e < n_expert ? l[e] : -INFINITY; /* fmaxf(mx, -INFINITY) is mx: a slot past the experts adds nothing */
        mx = fmaxf(mx, v[j]);
    }
    mx = warp_max_f32(mx);
    double sum = 0;
#pragma unroll
    for (int j = 0; j < NPL; j++)
        if (lane + j * WARP_SIZE < n_expert) {
            v[j] = expf(v[j] - mx);
            sum += v[j];
        }
    sum = warp_sum_f64(sum);
    const float inv = (float)(1.0 / sum);
#pragma unroll
    for (int j = 0; j < NPL; j++) {
        const int e = lane + j * WARP_SIZE;
        if (e < n_expert) {
            const float q = v[j] * inv;
            p[e] = !G && isnan(q) ? -0.5f : q;
        }
    }
    __syncwarp();
    if (!G)
        return;
    warp_mask_groups(p, n_expert, G, n_group_used, p + n_expert, lane);
    for (int e = lane; e < n_expert; e += WARP_SIZE)
        if (isnan(p[e]))
            p[e] = -0.5f;
    __syncwarp();
}

/* wv[j] = wr[c0 + lane + 32 j] for the chunk's elements below n (0 beyond). */
static __device__ __forceinline__ void rf_load(float wv[RF_LANE], const float *wr, int c0, int n, int lane)
{
#pragma unroll
    for (int j = 0; j < RF_LANE; j++) {
        const int i = c0 + lane + j * WARP_SIZE;
        wv[j] = i < n ? __ldg(wr + i) : 0.0f;
    }
}

/* The rank of expert e among p[0..n) (no NaN): the experts before it in the argmax passes' order, larger value
 * first, the lower id first among equal values. */
static __device__ __forceinline__ int rf_rank(const float *p, int n, int e)
{
    const float v = p[e];
    int r = 0;
#pragma unroll 4
    for (int f = 0; f < n; f++) {
        const float u = p[f];
        r += (u > v) | ((u == v) & (f < e));
    }
    return r;
}

/* The RMSNorm in front of the product (cuda_router_fused_norm): x [+ p], normed with w; vt = rmsnorm_threads(n),
 * the block width whose tree of sums cuda_rmsnorm follows, each of the router's threads playing RF_VT of its threads
 * (thread T + 128 m for m < RF_VT: warp w + 4 m of the norm is the router's warp w again, lanes in place, so its fold
 * is the same). Every block norms the rows for itself; the last block writes x and xn. */
typedef struct rf_norm {
    float *x;                 /* [n_tok][n]; written back (x + p) when p */
    const float *p;           /* NULL or [n_tok][n] */
    const float *w;           /* [n] */
    float eps;
    float *xn;                /* [n_tok][n] or NULL */
    unsigned long long *found; /* the non-finite check (NULL: none) */
    uint32_t site;
    int vt;
} rf_norm_t;

#define RF_VT (RN_MAX_THREADS / (ROUTER_WARPS * WARP_SIZE))
static_assert(RN_MAX_THREADS % (ROUTER_WARPS * WARP_SIZE) == 0 && RN_MAX_THREADS * RN_PER <= RF_CHUNK,
              "the norm's threads are whole rounds of the router's, a row one chunk");

/* xv: the rows' elements as the norm's threads hold them (with p added), nwv the weights (loaded before); xs[t]
 * [0..n) the normed rows; partial, scale_sh: shared. The rows: row0 .. row0 + n_tok - 1 of nm's. */
template <int NC>
static __device__ __forceinline__ void rf_norm_rows(const rf_norm_t &nm, int n, int n_tok, int row0,
                                                    float xv[NC][RF_VT][RN_PER], const float nwv[RF_VT][RN_PER],
                                                    float *xs, double (*partial)[RN_MAX_THREADS / WARP_SIZE],
                                                    float *scale_sh)
{
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const bool add = nm.p != NULL;
#pragma unroll
    for (int t = 0; t < NC; t++)
#pragma unroll
        for (int m = 0; m < RF_VT; m++)
#pragma unroll
            for (int q = 0; q < RN_PER; q++) {
                const int T = threadIdx.x + m * ROUTER_WARPS * WARP_SIZE, i = T + q * nm.vt;
                const bool in = t < n_tok && T < nm.vt && i < n;
                const int64_t o = (int64_t)(row0 + t) * n + (in ? i : 0);
                const float xk = in ? nm.x[o] : 0.0f, pk = in && add ? nm.p[o] : 0.0f;
                xv[t][m][q] = add ? residual_add(xk, pk) : xk;
            }
#pragma unroll
    for (int t = 0; t < NC; t++)
        if (t < n_tok)
#pragma unroll
            for (int m = 0; m < RF_VT; m++) {
                const int T = threadIdx.x + m * ROUTER_WARPS * WARP_SIZE;
                double sum = 0;
#pragma unroll
                for (int q = 0; q < RN_PER; q++)
                    if (T < nm.vt && T + q * nm.vt < n)
                        sum += (double)__fmul_rn(xv[t][m][q], xv[t][m][q]);
                sum = warp_sum_f64(sum);
                if (lane == 0 && T < nm.vt)
                    partial[t][warp + m * ROUTER_WARPS] = sum;
            }
    __syncthreads();
    if ((int)threadIdx.x < n_tok) { /* cuda_rmsnorm's thread 0 of row t */
        scale_sh[threadIdx.x] = rmsnorm_scale(partial[threadIdx.x], nm.vt / WARP_SIZE, n, nm.eps);
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < NC; t++)
#pragma unroll
        for (int m = 0; m < RF_VT; m++)
#pragma unroll
            for (int q = 0; q < RN_PER; q++) {
                const int T = threadIdx.x + m * ROUTER_WARPS * WARP_SIZE, i = T + q * nm.vt;
                if (t < n_tok && T < nm.vt && i < n)
                    xs[t * RF_CHUNK + i] = __fmul_rn(xv[t][m][q], scale_sh[t]) * nwv[m][q];
            }
}

/* The last block's writes of the normed rows: x [+ p] back to x (with p), xn, the non-finite check's finds as
 * cuda_rmsnorm_checked makes them (rows row0 .. row0 + n_tok - 1). */
template <int NC>
static __device__ __forceinline__ void rf_norm_out(const rf_norm_t &nm, int n, int n_tok, int row0,
                                                   const float xv[NC][RF_VT][RN_PER],
                                                   const float nwv[RF_VT][RN_PER], const float *scale_sh)
{
#pragma unroll
    for (int t = 0; t < NC; t++)
#pragma unroll
        for (int m = 0; m < RF_VT; m++)
#pragma unroll
            for (int q = 0; q < RN_PER; q++) {
                const int T = threadIdx.x + m * ROUTER_WARPS * WARP_SIZE, i = T + q * nm.vt;
                if (t < n_tok && T < nm.vt && i < n) {
                    const float sc = scale_sh[t], y = __fmul_rn(xv[t][m][q], sc) * nwv[m][q];
                    if (nm.p)
                        nm.x[(int64_t)(row0 + t) * n + i] = xv[t][m][q];
                    if (nm.xn)
                        nm.xn[(int64_t)(row0 + t) * n + i] = y;
                    if (nm.found && !isfinite(y))
                        rmsnorm_found(nm.found, nm.site, row0 + t, i, xv[t][m][q], sc);
                }
            }
    if (nm.found && (int)threadIdx.x < n_tok && !(scale_sh[threadIdx.x] > 0.0f))
        atomicMin(nm.found,
                  (unsigned long long)FINITE_KEY(nm.site, FINITE_RESIDUAL, row0 + threadIdx.x, FINITE_ELEM_NONE));
}

/* Block b: experts 4 b .. 4 b + 3 (a warp each) for the NC tokens (GROUPED: block (b, g) for token g alone, NC
 * 1), lane l's dot product over elements l, l + 32, ... in order with fmaf, then matmul_plain_row's fold
 * (cuda_matmul's bits); the tokens' activations go through shared memory a chunk at a time. Then the last block to
 * finish (of the row g: counted on done[g]) chooses: warp t token t's softmax (router_probs), and either every
 * thread ranks experts (n_expert <= RF_RANK_MAX; a rank below k is the slot the k argmax passes would give it) or
 * warp t makes router_token's passes. Shared memory: the larger of NC x RF_CHUNK activations and ROUTER_WARPS x
 * (n_expert logits + n_expert + G). */
template <int NC, bool NORM, bool GROUPED>
static __global__ void __launch_bounds__(ROUTER_WARPS * WARP_SIZE)
    router_fused_kernel(const float *__restrict__ W, size_t w_stride, const float *__restrict__ x, size_t x_stride,
                        int n_embd, float *logits, int n_tok, int n_expert, int k, int G, int n_group_used,
                        bool renorm, float scale, int32_t *ids, float *w, unsigned long long *counts,
                        unsigned int *done, rf_norm_t nm)
{
    extern __shared__ float fused_sh[];
    __shared__ bool last;
    __shared__ double norm_partial[NORM ? NC : 1][RN_MAX_THREADS / WARP_SIZE];
    __shared__ float norm_scale[NORM ? NC : 1];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int e = blockIdx.x * ROUTER_WARPS + warp;
    const bool mine = e < n_expert;
    static_assert(!GROUPED || NC == 1, "a row of blocks takes one token");
    const int row0 = GROUPED ? (int)blockIdx.y : 0; /* the block's first token */
    if constexpr (GROUPED) { /* the row's token: the pointers below are its, the norm's rows at row0 */
        n_tok = 1;
        x = (const float *)((const char *)x + (size_t)row0 * x_stride);
        logits += (int64_t)row0 * n_expert;
        ids += (int64_t)row0 * k;
        w += (int64_t)row0 * k;
        done += row0;
    }
    const float *wr = (const float *)((const char *)W + (size_t)(mine ? e : 0) * w_stride);
    float wv[RF_LANE];
    if (mine)
        rf_load(wv, wr, 0, n_embd, lane);
    constexpr int NT = NORM ? NC : 1, NV = NORM ? RF_VT : 1, NQ = NORM ? RN_PER : 1;
    float xv[NT][NV][NQ], nwv[NV][NQ];
    if constexpr (NORM) /* the norm's weights too */
#pragma unroll
        for (int m = 0; m < NV; m++)
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                const int T = threadIdx.x + m * ROUTER_WARPS * WARP_SIZE, i = T + q * nm.vt;
                nwv[m][q] = T < nm.vt && i < n_embd ? nm.w[i] : 0.0f;
            }
    pdl_begin();
    if constexpr (NORM) /* n_embd <= RF_CHUNK: the one chunk's activations */
        rf_norm_rows<NC>(nm, n_embd, n_tok, row0, xv, nwv, fused_sh, norm_partial, norm_scale);
    float acc[NC];
#pragma unroll
    for (int t = 0; t < NC; t++)
        acc[t] = 0.0f;
    for (int c0 = 0; c0 < n_embd; c0 += RF_CHUNK) {
        if (c0 > 0 && mine)
            rf_load(wv, wr, c0, n_embd, lane);
        const int cn = min(RF_CHUNK, n_embd - c0);
#pragma unroll
        for (int t = 0; t < (NORM ? 0 : NC); t++) {
            const float *xr = (const float *)((const char *)x + (size_t)t * x_stride) + c0;
#pragma unroll
            for (int j = 0; j < RF_CHUNK / (ROUTER_WARPS * WARP_SIZE); j++) {
                const int i = (int)threadIdx.x + j * ROUTER_WARPS * WARP_SIZE;
                if (t < n_tok && i < cn)
                    fused_sh[t * RF_CHUNK + i] = xr[i];
            }
        }
        __syncthreads(); /* the chunk's activations in */
        if (mine)
#pragma unroll
            for (int j = 0; j < RF_LANE; j++) {
                const int i = lane + j * WARP_SIZE;
                if (i < cn)
#pragma unroll
                    for (int t = 0; t < NC; t++)
                        if (t < n_tok)
                            acc[t] = fmaf(wv[j], fused_sh[t * RF_CHUNK + i], acc[t]);
            }
        __syncthreads(); /* read before the next chunk (or the choice) overwrites them */
    }
    /* acc[j] = acc[j] + acc[j + h], h = 16, 8, 4, 2, 1: lane j < h reads lane j + h (matmul_plain_row's fold) */
#pragma unroll
    for (int h = WARP_SIZE / 2; h >= 1; h /= 2)
#pragma unroll
        for (int t = 0; t < NC; t++)
            acc[t] = acc[t] + __shfl_down_sync(FULL_MASK, acc[t], h);
    if (mine && lane == 0)
#pragma unroll
        for (int t = 0; t < NC; t++)
            if (t < n_tok)
                logits[(int64_t)t * n_expert + e] = acc[t];
    __syncthreads(); /* the block's logits written */
    if (threadIdx.x == 0) {
        __threadfence(); /* ... and visible before the count says so */
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    if (threadIdx.x == 0)
        *done = 0; /* every block (of the row) has counted: ready for the next launch */
    if constexpr (NORM) /* no block reads the rows' x any more */
        rf_norm_out<NC>(nm, n_embd, n_tok, row0, xv, nwv, norm_scale);
    const int t = warp, per = 2 * n_expert + G;
    float *l = fused_sh + (size_t)warp * per, *p = l + n_expert;
    if (t < n_tok) {
        for (int i = lane; i < n_expert; i += WARP_SIZE) /* L2, not a stale L1 line: other blocks wrote them */
            l[i] = __ldcg(logits + (int64_t)t * n_expert + i);
        __syncwarp();
        if (n_expert > RF_RANK_MAX) {
            router_token(l, p, n_expert, k, G, n_group_used, renorm, scale, ids + (int64_t)t * k, w + (int64_t)t * k,
                         counts, lane);
            return;
        }
        router_probs_reg(l, p, n_expert, G, n_group_used, lane); /* masked experts stay -INFINITY, below every other */
    }
    if (n_expert > RF_RANK_MAX)
        return;
    __syncthreads(); /* every token's p */
    for (int tt = 0; tt < n_tok; tt++) {
        const float *pt = fused_sh + (size_t)tt * per + n_expert;
        int *slot = (int *)(fused_sh + (size_t)tt * per); /* the token's logits are consumed */
        for (int i = threadIdx.x; i < n_expert; i += ROUTER_WARPS * WARP_SIZE) {
            const int r = rf_rank(pt, n_expert, i);
            if (r < k)
                slot[r] = i;
        }
    }
    __syncthreads(); /* every slot named */
    if (t >= n_tok)
        return;
    const int my_id = lane < k ? ((const int *)l)[lane] : 0;
    const float my_w = lane < k ? p[my_id] : 0.0f;
    router_finish(my_id, my_w, k, renorm, scale, ids + (int64_t)t * k, w + (int64_t)t * k, counts, n_expert, lane);
}

/* ---- the cluster form (cuda_set_router_cluster) ----------------------------------------------------------------
 * A token's experts over a thread block cluster of CB blocks of CW warps, a warp an expert row (more rounds above
 * CB x CW experts), the products those of router_fused_kernel: each block norms the token's row for itself (its
 * threads play cuda_rmsnorm's, a block being at least the norm's width), and every warp hands its logit to the
 * cluster's first block, into its shared memory (distributed shared memory). The cluster's hardware barrier then
 * stands for the counter, the fence and the logits' trip back through L2 of the form without clusters. The last
 * block writes the normed row; the first chooses: each of its warps makes the token's softmax (router_probs_reg:
 * the same bits in each, no block barrier), the ranks go over all its threads (the experts above each alone,
 * rf_rank's order again only where a tie reaches the first k), warp 0 weighs the slots from the weights kept beside
 * them (router_finish's arithmetic). The choosing block's path is the step's, so it takes as few instructions as it
 * can (bench/results/dense68-h100-2026-12-07-s68.md). */
#define RC_EXPERTS_MAX RF_RANK_MAX
/* Its dynamic shared memory (floats): the logits, a warp's probabilities and group scores each, the k slots' experts
 * and their weights. */
#define RC_SMEM_FLOATS(ne, G, cw) ((size_t)(ne) + (size_t)(cw) * (size_t)((ne) + (G)) + 2 * WARP_SIZE)

/* cuda_set_router_timeline's stamp i of this block, where tl is set. */
static __device__ __forceinline__ void rc_stamp(unsigned long long *tl, int i)
{
    if (tl)
        block_stamp(tl, CUDA_ROUTER_TL_STAMPS, i);
}

/* Grid (CB, n_tok), clusters of CB along x: cluster y is token y, block b's warps experts CB CW r + CW b + warp.
 * PUB (a lone token): the first block also publishes the token to the MoE exchange (cuda_xchg_pub_t), as
 * cuda_xchg_publish would after the launch: the exchange's counters loaded with the first loads, the row into the
 * slot once it is in shared memory, the ids and the header once the slots are named, then one system-scope fence
 * round of the block and the ring, before the weights (the CPU workers need only the row and the ids). */
template <int CB, int CW, bool NORM, bool PUB>
static __device__ __forceinline__ void router_cluster_body(const float *__restrict__ W, size_t w_stride,
                                                           const float *__restrict__ x, size_t x_stride, int n_embd,
                                                           float *logits, int n_expert, int k, int G,
                                                           int n_group_used, bool renorm, float scale, int32_t *ids,
                                                           float *w, unsigned long long *counts, const rf_norm_t &nm,
                                                           unsigned long long *tl, const cuda_xchg_pub_t &pub)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    rc_stamp(tl, CUDA_ROUTER_TL_ENTRY);
    constexpr int BT = CW * WARP_SIZE;
    static_assert(BT >= RN_MAX_THREADS, "a block plays every thread of the norm");
    extern __shared__ __align__(16) float rc_sh[];
    __shared__ __align__(16) float xs[RF_CHUNK]; /* the token's (normed) row */
    __shared__ double partial[RN_MAX_THREADS / WARP_SIZE];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, T = threadIdx.x;
    const int tok = blockIdx.y;
    cluster_arrive_relaxed(); /* phase 1: when it completes, every block of the cluster runs */
    x = (const float *)((const char *)x + (size_t)tok * x_stride);
    logits += (int64_t)tok * n_expert;
    ids += (int64_t)tok * k;
    w += (int64_t)tok * k;
    const int e0 = (int)blockIdx.x * CW + warp, rounds = (n_expert + CB * CW - 1) / (CB * CW);
    float wv[RF_LANE];
    if (e0 < n_expert)
        rf_load(wv, (const float *)((const char *)W + (size_t)e0 * w_stride), 0, n_embd, lane);
    constexpr int NQ = NORM ? RN_PER : 1;
    float xv[NQ], nwv[NQ], sc = 0.0f;
    const int64_t o = (int64_t)tok * n_embd; /* the norm's row */
    if constexpr (NORM)
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            const int i = T + q * nm.vt;
            nwv[q] = T < nm.vt && i < n_embd ? nm.w[i] : 0.0f;
        }
    pdl_wait();
    xchg_pub_counters_t pc = {};
    if constexpr (PUB)
        if (blockIdx.x == 0)
            pc = xchg_pub_load(pub);
    rc_stamp(tl, CUDA_ROUTER_TL_WAIT);
    if constexpr (NORM) { /* rf_norm_rows' operations, thread T as the norm's thread T */
        double sum = 0;
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            const int i = T + q * nm.vt;
            const bool in = T < nm.vt && i < n_embd;
            const float xk = in ? nm.x[o + i] : 0.0f, pk = in && nm.p ? nm.p[o + i] : 0.0f;
            xv[q] = nm.p ? residual_add(xk, pk) : xk;
        }
#pragma unroll
        for (int q = 0; q < NQ; q++)
            if (T < nm.vt && T + q * nm.vt < n_embd)
                sum += (double)__fmul_rn(xv[q], xv[q]);
        sum = warp_sum_f64(sum);
        if (lane == 0 && T < nm.vt)
            partial[warp] = sum;
        __syncthreads();
        /* every thread adds the warps' sums in cuda_rmsnorm's order: no second barrier */
        sc = rmsnorm_scale(partial, nm.vt / WARP_SIZE, n_embd, nm.eps);
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            const int i = T + q * nm.vt;
            if (T < nm.vt && i < n_embd)
                xs[i] = __fmul_rn(xv[q], sc) * nwv[q];
        }
    } else {
        for (int i = T; i < n_embd; i += BT)
            xs[i] = x[i];
    }
    __shared__ unsigned rk_slots, rk_tie; /* the first block's ranks: the slots below k written, a slot written twice */
    if (T == 0) {
        rk_slots = 0;
        rk_tie = 0;
    }
    __syncthreads(); /* the row in */
    rc_stamp(tl, CUDA_ROUTER_TL_ROW);
    int pcode = CUDA_XCHG_SKIP; /* PUB, the first block: whether it writes the exchange's slot */
    unsigned long long pseq = 0;
    if constexpr (PUB)
        if (blockIdx.x == 0) {
            __shared__ int s_pcode;
            pcode = xchg_pub_claim(pub, pc, &pseq, &s_pcode);
            if (pcode == CUDA_XCHG_OK)
                xchg_pub_row(pub, pseq, xs, n_embd);
        }
    float *lg = rc_sh; /* [n_expert], in the first block: every block's logits */
    cluster_wait_acquire(); /* phase 1 (long complete: the blocks started together) */
    const uint32_t lead_lg = cluster_map(lg, 0);
    for (int r = 0; r < rounds; r++) {
        const int e = e0 + r * CB * CW; /* the warp's expert, the same in all its lanes */
        if (r > 0 && e < n_expert)
            rf_load(wv, (const float *)((const char *)W + (size_t)e * w_stride), 0, n_embd, lane);
        float acc = 0.0f;
        if (e < n_expert && n_embd == RF_CHUNK) { /* a whole chunk: the row's loads 16 at a time, then the FMAs */
#pragma unroll
            for (int j0 = 0; j0 < RF_LANE; j0 += 16) {
                float xr[16];
#pragma unroll
                for (int j = 0; j < 16; j++)
                    xr[j] = xs[lane + (j0 + j) * WARP_SIZE];
#pragma unroll
                for (int j = 0; j < 16; j++)
                    acc = fmaf(wv[j0 + j], xr[j], acc);
            }
        } else if (e < n_expert) {
#pragma unroll
            for (int j = 0; j < RF_LANE; j++) {
                const int i = lane + j * WARP_SIZE;
                if (i < n_embd)
                    acc = fmaf(wv[j], xs[i], acc);
            }
        }
#pragma unroll
        for (int h = WARP_SIZE / 2; h >= 1; h /= 2) /* matmul_plain_row's fold */
            acc = acc + __shfl_down_sync(FULL_MASK, acc, h);
        if (e < n_expert && lane == 0) {
            logits[e] = acc;
            cluster_store_f32(lead_lg + (uint32_t)e * sizeof(float), acc);
        }
    }
    cluster_arrive_release(); /* phase 2: every logit in the first block's shared memory */
    cluster_wait_acquire();
    rc_stamp(tl, CUDA_ROUTER_TL_LOGITS);
    if constexpr (PUB) /* the next kernel's blocks (the hint's router: in the exchange's shadow) after the products */
        pdl_trigger();
    /* rf_norm_out's writes (every block has read x), by the last block: they stay off the choosing block's path */
    if constexpr (NORM)
        if (blockIdx.x == (CB > 1 ? CB - 1 : 0)) {
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                const int i = T + q * nm.vt;
                if (T < nm.vt && i < n_embd) {
                    const float y = __fmul_rn(xv[q], sc) * nwv[q];
                    if (nm.p)
                        nm.x[o + i] = xv[q];
                    if (nm.xn)
                        nm.xn[o + i] = y;
                    if (nm.found && !isfinite(y))
                        rmsnorm_found(nm.found, nm.site, tok, i, xv[q], sc);
                }
            }
            if (nm.found && T == 0 && !(sc > 0.0f))
                atomicMin(nm.found, (unsigned long long)FINITE_KEY(nm.site, FINITE_RESIDUAL, tok, FINITE_ELEM_NONE));
        }
    if (blockIdx.x != 0) {
        rc_stamp(tl, CUDA_ROUTER_TL_END);
        return;
    }
    const int per = n_expert + G;
    float *p = rc_sh + n_expert + (size_t)warp * per; /* this warp's copy */
    int *slot = (int *)(rc_sh + n_expert + (size_t)CW * per);
    router_probs_reg(lg, p, n_expert, G, n_group_used, lane);
    rc_stamp(tl, CUDA_ROUTER_TL_PROBS);
    /* The warp's share of experts ranked against its own copy, tpe lanes an expert: first by the experts above it
     * alone (one comparison an element). Without ties that is rf_rank's rank. A tie among the first k shows: the
     * experts of a tie all take its first rank, so that slot is written twice (or the tie's later slots, below k,
     * stay empty). Then the block ranks again in rf_rank's order (the lower id first among equal values). A lane
     * `sub` counts a contiguous run of float4s where the copy splits into them. */
    const int epw = (n_expert + CW - 1) / CW;
    int lt = 0; /* tpe = 1 << lt lanes an expert */
    while (lt < 5 && (2 << lt) * epw <= WARP_SIZE)
        lt++;
    const int tpe = 1 << lt, sub = lane & (tpe - 1);
    const int run = n_expert >> lt; /* experts a lane counts in the float4 form */
    const bool vec = (n_expert & (4 * tpe - 1)) == 0 && per % 4 == 0;
    float *slot_w = (float *)(slot + WARP_SIZE);
    for (int b = 0; b < epw; b += WARP_SIZE >> lt) {
        const int le = b + (lane >> lt), e = warp * epw + le;
        const bool ok = le < epw && e < n_expert;
        const float v = ok ? p[e] : 0.0f;
        int r = 0;
        if (ok && vec) {
            const float4 *p4 = (const float4 *)(p + sub * run);
#pragma unroll 4
            for (int j = 0; j < run >> 2; j++) {
                const float4 u = p4[j];
                r += (u.x > v) + (u.y > v) + (u.z > v) + (u.w > v);
            }
        } else if (ok) {
#pragma unroll 4
            for (int f = sub; f < n_expert; f += tpe)
                r += p[f] > v;
        }
        for (int m = 1; m < tpe; m <<= 1)
            r += __shfl_xor_sync(FULL_MASK, r, m);
        if (ok && sub == 0 && r < k) {
            slot[r] = e;
            slot_w[r] = v;
            if (atomicOr(&rk_slots, 1u << r) & (1u << r))
                rk_tie = 1;
        }
    }
    __syncthreads(); /* every slot named, or a tie seen */
    if (rk_tie || rk_slots != (k < WARP_SIZE ? (1u << k) - 1u : ~0u)) {
        for (int e = T; e < n_expert; e += BT) { /* rf_rank's order; this warp's copy (all the same bits) */
            const int r = rf_rank(p, n_expert, e);
            if (r < k) {
                slot[r] = e;
                slot_w[r] = p[e];
            }
        }
        __syncthreads(); /* every slot named once */
    }
    /* The next kernel's blocks (the experts' weights asked for before their wait, all-GPU) after the choice, not
     * after the products: launched while the choosing block ranks, they slowed the choice and the experts' first
     * product both (bench/results/dense52-h100-2026-12-05-s52.md). The publishing form keeps the earlier point
     * (its next kernel is the hint's, and its path was 0.2 us longer with the later one). */
    if constexpr (!PUB)
        pdl_trigger();
    rc_stamp(tl, CUDA_ROUTER_TL_RANKS);
    if constexpr (PUB) {
        if (pcode == CUDA_XCHG_OK) { /* the ids and the header, then one fence round of the block, then the ring */
            if (warp == 0 && lane < k)
                xchg_pub_id(pub, pseq, lane, slot[lane]);
            if (T == 0)
                xchg_pub_header(pub, pseq);
            __threadfence_system();
            __syncthreads();
            if (T == 0)
                xchg_pub_ring(pub, pseq);
        } else if (pcode != CUDA_XCHG_SKIP && T == 0) {
            xchg_pub_fail(pub, pseq, pcode);
        }
    }
    if (warp != 0)
        return;
    const int my_id = lane < k ? slot[lane] : 0;
    const float my_w = lane < k ? slot_w[lane] : 0.0f;
    router_finish<true>(my_id, my_w, k, renorm, scale, ids, w, counts, n_expert, lane, slot_w);
    rc_stamp(tl, CUDA_ROUTER_TL_END);
#endif
}

template <int CB, int CW, bool NORM>
static __global__ void __launch_bounds__(CW * WARP_SIZE, 16 / CW)
    router_cluster_kernel(const float *__restrict__ W, size_t w_stride, const float *__restrict__ x, size_t x_stride,
                          int n_embd, float *logits, int n_expert, int k, int G, int n_group_used, bool renorm,
                          float scale, int32_t *ids, float *w, unsigned long long *counts, rf_norm_t nm,
                          unsigned long long *tl, cuda_xchg_pub_t pub)
{
    router_cluster_body<CB, CW, NORM, false>(W, w_stride, x, x_stride, n_embd, logits, n_expert, k, G, n_group_used,
                                             renorm, scale, ids, w, counts, nm, tl, pub);
}

/* router_cluster_kernel that publishes its lone token (a name of its own in profiles: the exchange's publish). */
template <int CB, int CW, bool NORM>
static __global__ void __launch_bounds__(CW * WARP_SIZE, 16 / CW)
    router_publish_kernel(const float *__restrict__ W, size_t w_stride, const float *__restrict__ x,
                          size_t x_stride, int n_embd, float *logits, int n_expert, int k, int G, int n_group_used,
                          bool renorm, float scale, int32_t *ids, float *w, unsigned long long *counts, rf_norm_t nm,
                          unsigned long long *tl, cuda_xchg_pub_t pub)
{
    router_cluster_body<CB, CW, NORM, true>(W, w_stride, x, x_stride, n_embd, logits, n_expert, k, G, n_group_used,
                                            renorm, scale, ids, w, counts, nm, tl, pub);
}

/* The cluster form's kernel: router_publish_kernel where it publishes, else router_cluster_kernel. */
template <int CB, int CW, bool NORM, bool PUB>
static auto rc_kernel()
{
    if constexpr (PUB)
        return router_publish_kernel<CB, CW, NORM>;
    else
        return router_cluster_kernel<CB, CW, NORM>;
}

/* Whether rc_kernel<CB, CW, NORM, PUB> runs here: an sm_90 device on which a cluster of CB such blocks (with the
 * most shared memory the form takes) can be scheduled. Asked once a process. */
template <int CB, int CW, bool NORM, bool PUB = false>
static bool rc_usable()
{
    static const bool ok = [] {
        int dev = 0, major = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 9 ||
            (CB > 8 && cudaFuncSetAttribute(rc_kernel<CB, CW, NORM, PUB>(),
                                            cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)) {
            (void)cudaGetLastError();
            return false;
        }
        return cuda_cluster_fits(rc_kernel<CB, CW, NORM, PUB>(), CB, CUDA_ROUTER_FUSED_MAX, CW * WARP_SIZE,
                                 RC_SMEM_FLOATS(RC_EXPERTS_MAX, RC_EXPERTS_MAX / 2, CW) * sizeof(float));
    }();
    return ok;
}

static std::atomic<int> g_router_cluster{CUDA_ROUTER_CLUSTER_DEFAULT};
static std::atomic<unsigned long long *> g_router_tl{nullptr};

extern "C" void cuda_set_router_timeline(unsigned long long *stamps)
{
    g_router_tl.store(stamps, std::memory_order_relaxed);
}

extern "C" int cuda_set_router_cluster(int blocks)
{
    const int v = blocks == 16 && rc_usable<16, 8, true>() && rc_usable<16, 8, false>() ? 16
                  : blocks == 8 && rc_usable<8, 16, true>() && rc_usable<8, 16, false>() ? 8
                                                                                         : 0;
    g_router_cluster.store(v, std::memory_order_relaxed);
    return v;
}

extern "C" int cuda_router_cluster(void)
{
    return g_router_cluster.load(std::memory_order_relaxed);
}

/* The cluster form's launch (rf_launch's arguments, checked there), or false where it does not apply: clusters
 * off, more experts than it ranks, a row past one chunk, no cluster of that size here. With pub (a lone token, the
 * norm in the launch) the launch publishes the token where router_publish_kernel runs here: *published. */
template <int CB, int CW, bool NORM, bool PUB>
static void rc_go(const float *W, size_t w_stride, const float *x, size_t x_stride, int32_t n_embd, float *logits,
                  int32_t n_tok, int32_t n_expert, int32_t k, int32_t G, int32_t n_group_used, bool renorm,
                  float scale, int32_t *ids, float *w, unsigned long long *counts, const rf_norm_t &nm,
                  const cuda_xchg_pub_t &pub, cudaStream_t s)
{
    cuda_launch_pdl_cluster(rc_kernel<CB, CW, NORM, PUB>(), dim3((unsigned)CB, (unsigned)n_tok), CW * WARP_SIZE,
                            RC_SMEM_FLOATS(n_expert, G, CW) * sizeof(float), CB, s, W, w_stride, x, x_stride, n_embd,
                            logits, n_expert, k, G, n_group_used, renorm, scale, ids, w, counts, nm,
                            g_router_tl.load(std::memory_order_relaxed), pub);
}

template <bool NORM>
static bool rc_launch(const float *W, size_t w_stride, const float *x, size_t x_stride, int32_t n_embd, float *logits,
                      int32_t n_tok, int32_t n_expert, int32_t k, int32_t G, int32_t n_group_used, bool renorm,
                      float scale, int32_t *ids, float *w, unsigned long long *counts, const rf_norm_t &nm,
                      const cuda_xchg_pub_t *pub, bool *published, cudaStream_t s)
{
    *published = false;
    const int cb = cuda_router_cluster();
    if (!cb || n_expert > RC_EXPERTS_MAX || n_embd > RF_CHUNK)
        return false;
    const cuda_xchg_pub_t none = {};
    const bool pb = NORM && pub && n_tok == 1;
    if (cb == 16 && pb && rc_usable<16, 8, NORM, true>()) {
        rc_go<16, 8, NORM, true>(W, w_stride, x, x_stride, n_embd, logits, n_tok, n_expert, k, G, n_group_used, renorm,
                                 scale, ids, w, counts, nm, *pub, s);
        *published = true;
        return true;
    }
    if (cb == 8 && pb && rc_usable<8, 16, NORM, true>()) {
        rc_go<8, 16, NORM, true>(W, w_stride, x, x_stride, n_embd, logits, n_tok, n_expert, k, G, n_group_used, renorm,
                                 scale, ids, w, counts, nm, *pub, s);
        *published = true;
        return true;
    }
    if (cb == 16 && rc_usable<16, 8, NORM>()) {
        rc_go<16, 8, NORM, false>(W, w_stride, x, x_stride, n_embd, logits, n_tok, n_expert, k, G, n_group_used,
                                  renorm, scale, ids, w, counts, nm, none, s);
        return true;
    }
    if (cb == 8 && rc_usable<8, 16, NORM>()) {
        rc_go<8, 16, NORM, false>(W, w_stride, x, x_stride, n_embd, logits, n_tok, n_expert, k, G, n_group_used,
                                  renorm, scale, ids, w, counts, nm, none, s);
        return true;
    }
    return false;
}

extern "C" int cuda_router_topk(const float *logits, int32_t n_tok, int32_t n_expert, int32_t k, int32_t n_groups,
                                int32_t n_group_used, bool renorm, float scale, int32_t *ids, float *w,
                                unsigned long long *counts, cudaStream_t s, guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    const int32_t G = n_groups > 1 ? n_groups : 0;
    if (router_shape_check(n_expert, k, G, n_group_used, err) < 0)
        return -1;
    const size_t smem = (size_t)ROUTER_WARPS * (size_t)(n_expert + G) * sizeof(float);
    cuda_launch_pdl(router_kernel, (unsigned)((n_tok + ROUTER_WARPS - 1) / ROUTER_WARPS), ROUTER_WARPS * WARP_SIZE,
                    smem, s, logits, n_tok, n_expert, k, G, n_group_used, renorm, scale, ids, w, counts);
    return cuda_launch_check("router", err);
}

/* The launch of router_fused_kernel for n_tok tokens (checked by the callers): one token a block, several tokens a
 * row of blocks each (GROUPED): a block's chain of latencies is the shortest with one token, and the rows' blocks
 * run side by side (128 experts: 32 blocks a row, 16 rows 512 blocks, about 4 an SM). */
template <bool NORM>
static int rf_launch(const float *W, size_t w_stride, const float *x, size_t x_stride, int32_t n_embd, float *logits,
                     int32_t n_tok, int32_t n_expert, int32_t k, int32_t n_groups, int32_t n_group_used, bool renorm,
                     float scale, int32_t *ids, float *w, unsigned long long *counts, unsigned int *done,
                     const rf_norm_t &nm, const cuda_xchg_pub_t *pub, cudaStream_t s, guild_err_t *err)
{
    if (n_tok > CUDA_ROUTER_FUSED_MAX)
        return guild_err_set(err, "cuda: router (fused): %d tokens (1..%d)", n_tok, CUDA_ROUTER_FUSED_MAX);
    const int32_t G = n_groups > 1 ? n_groups : 0;
    if (router_shape_check(n_expert, k, G, n_group_used, err) < 0)
        return -1;
    if (n_embd <= 0 || ((uintptr_t)W | w_stride) % sizeof(float))
        return guild_err_set(err, "cuda: router (fused): rows of %d floats, %zu bytes apart", n_embd, w_stride);
    bool published = false;
    if (rc_launch<NORM>(W, w_stride, x, x_stride, n_embd, logits, n_tok, n_expert, k, G, n_group_used, renorm, scale,
                        ids, w, counts, nm, pub, &published, s)) {
        if (cuda_launch_check(NORM ? "router (fused, with its norm, a cluster a token)"
                                   : "router (fused, a cluster a token)", err) < 0)
            return -1;
        return published ? 1 : 0;
    }
    const unsigned blocks = (unsigned)((n_expert + ROUTER_WARPS - 1) / ROUTER_WARPS);
    const size_t choice = (size_t)ROUTER_WARPS * (size_t)(2 * n_expert + G) * sizeof(float);
    const size_t acts = (size_t)RF_CHUNK * sizeof(float);
    const size_t smem = choice > acts ? choice : acts;
    if (n_tok == 1)
        cuda_launch_pdl(router_fused_kernel<1, NORM, false>, blocks, ROUTER_WARPS * WARP_SIZE, smem, s, W, w_stride,
                        x, x_stride, n_embd, logits, n_tok, n_expert, k, G, n_group_used, renorm, scale, ids, w,
                        counts, done, nm);
    else
        cuda_launch_pdl(router_fused_kernel<1, NORM, true>, dim3(blocks, (unsigned)n_tok), ROUTER_WARPS * WARP_SIZE,
                        smem, s, W, w_stride, x, x_stride, n_embd, logits, n_tok, n_expert, k, G, n_group_used,
                        renorm, scale, ids, w, counts, done, nm);
    return cuda_launch_check(NORM ? "router (fused, with its norm)" : "router (fused)", err);
}

extern "C" int cuda_router_fused(const float *W, size_t w_stride, const float *x, int64_t ldx, int32_t n_embd,
                                 float *logits, int32_t n_tok, int32_t n_expert, int32_t k, int32_t n_groups,
                                 int32_t n_group_used, bool renorm, float scale, int32_t *ids, float *w,
                                 unsigned long long *counts, unsigned int *done, cudaStream_t s, guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    const rf_norm_t none = {};
    return rf_launch<false>(W, w_stride, x, (size_t)ldx * sizeof(float), n_embd, logits, n_tok, n_expert, k, n_groups,
                            n_group_used, renorm, scale, ids, w, counts, done, none, NULL, s, err);
}

/* What xchg.cu's check_view asks of an exchange, and counters. */
static bool pub_bad(const cuda_xchg_pub_t *p)
{
    const guild_exchange_layout_t *l = &p->view.layout;
    return !p->d || !p->view.base || !p->view.cancel || p->view.n_workers < 1 || p->view.max_tokens < 1 ||
           l->n_slots < 1 || ((uintptr_t)p->view.base | l->slot_off | l->slot_stride | l->x_off | l->y_off) % 16;
}

extern "C" int cuda_router_fused_norm(const cuda_router_norm_t *nm, const float *W, size_t w_stride, int32_t n_embd,
                                      float *logits, int32_t n_tok, int32_t n_expert, int32_t k, int32_t n_groups,
                                      int32_t n_group_used, bool renorm, float scale, int32_t *ids, float *w,
                                      unsigned long long *counts, unsigned int *done, cudaStream_t s,
                                      guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    if (!nm->x || !nm->w)
        return guild_err_set(err, "cuda: router (fused, with its norm): no residual rows or no norm weights");
    if (n_embd <= 0 || n_embd > CUDA_ROUTER_NORM_MAX)
        return guild_err_set(err, "cuda: router (fused, with its norm): rows of %d elements (1..%d)", n_embd,
                             CUDA_ROUTER_NORM_MAX);
    if (nm->found && (nm->site >= FINITE_MAX_SITES || n_embd > (int64_t)FINITE_MAX_ELEMS))
        return guild_err_set(err, "cuda: router (fused, with its norm): site %u or a row of %d elements is past "
                             "the non-finite check's keys", nm->site, n_embd);
    const rf_norm_t f = {nm->x, nm->p, nm->w, nm->eps, nm->xn, (unsigned long long *)nm->found, nm->site,
                         rmsnorm_threads(n_embd)};
    /* the rows go through f alone: the launch writes them */
    if (nm->pub && pub_bad(nm->pub))
        return guild_err_set(err, "cuda: router (fused, with its norm): a bad exchange to publish to");
    return rf_launch<true>(W, w_stride, NULL, 0, n_embd, logits, n_tok, n_expert, k, n_groups, n_group_used, renorm,
                           scale, ids, w, counts, done, f, nm->pub, s, err);
}
