/* cuda_router_topk: cpu_router_softmax_grouped, one warp per token: softmax (sum in double), with expert groups
 * the experts of all but the best groups masked (router_groups.cuh), k passes of a warp argmax (ties to the lowest
 * expert id, as the CPU's scan), optional renormalisation summed in slot order, scale; with counts, each chosen
 * expert counted (cuda_route_count's counters, which then need no launch of their own).
 *
 * cuda_router_fused is the router's F32 product (matmul_plain.cuh's rows, cuda_matmul's bits) and cuda_router_topk
 * in one launch, for a decode step's few tokens: the product's blocks write the logits, and the block that
 * finishes last (a device counter) chooses the experts of every token from them, with the same warp body. */
#include "gpu-worker/dense/cuda/matmul_plain.cuh"
#include "gpu-worker/dense/cuda/router_groups.cuh"

#define ROUTER_WARPS 4

/* One token's choice by one warp: its logits l[0..n_expert) (read once), p: n_expert + G floats of shared
 * memory; ids/w: the token's k slots. */
static __device__ __forceinline__ void router_token(const float *l, float *p, int n_expert, int k, int G,
                                                    int n_group_used, bool renorm, float scale, int32_t *ids, float *w,
                                                    unsigned long long *counts, int lane)
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
    if (renorm) {
        float wsum = 0.0f;
        for (int s = 0; s < k; s++)
            wsum = wsum + __shfl_sync(FULL_MASK, my_w, s);
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

/* Block b: experts 4 b .. 4 b + 3 (a warp each) for the NC tokens; then the last block to finish, warp t token t.
 * Shared memory: ROUTER_WARPS x (n_expert logits + n_expert + G). */
template <int NC>
static __global__ void __launch_bounds__(ROUTER_WARPS * WARP_SIZE)
    router_fused_kernel(const float *__restrict__ W, size_t w_stride, const float *__restrict__ x, size_t x_stride,
                        int n_embd, float *logits, int n_tok, int n_expert, int k, int G, int n_group_used,
                        bool renorm, float scale, int32_t *ids, float *w, unsigned long long *counts,
                        unsigned int *done)
{
    extern __shared__ float fused_sh[];
    __shared__ bool last;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int e = blockIdx.x * ROUTER_WARPS + warp;
    const float *wr = (const float *)((const char *)W + (size_t)e * w_stride);
    if (e < n_expert) /* the weights are no kernel's output (cuda_common.cuh) */
        for (size_t o = (size_t)lane * 128; o < (size_t)n_embd * sizeof(float); o += WARP_SIZE * 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)wr + o));
    pdl_begin();
    if (e < n_expert) {
        float acc[NC];
        matmul_plain_row<float, NC>(wr, (const char *)x, x_stride, n_embd, n_tok, lane, acc);
        if (lane == 0)
#pragma unroll
            for (int t = 0; t < NC; t++)
                if (t < n_tok)
                    logits[(int64_t)t * n_expert + e] = acc[t];
    }
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
        *done = 0; /* every block has counted: ready for the next launch */
    const int t = warp;
    if (t >= n_tok)
        return;
    float *l = fused_sh + (size_t)warp * (2 * n_expert + G), *p = l + n_expert;
    for (int i = lane; i < n_expert; i += WARP_SIZE) /* L2, not a stale L1 line: other blocks wrote them */
        l[i] = __ldcg(logits + (int64_t)t * n_expert + i);
    __syncwarp();
    router_token(l, p, n_expert, k, G, n_group_used, renorm, scale, ids + (int64_t)t * k, w + (int64_t)t * k, counts,
                 lane);
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

extern "C" int cuda_router_fused(const float *W, size_t w_stride, const float *x, int64_t ldx, int32_t n_embd,
                                 float *logits, int32_t n_tok, int32_t n_expert, int32_t k, int32_t n_groups,
                                 int32_t n_group_used, bool renorm, float scale, int32_t *ids, float *w,
                                 unsigned long long *counts, unsigned int *done, cudaStream_t s, guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    if (n_tok > CUDA_ROUTER_FUSED_ROWS)
        return guild_err_set(err, "cuda: router (fused): %d tokens (1..%d)", n_tok, CUDA_ROUTER_FUSED_ROWS);
    const int32_t G = n_groups > 1 ? n_groups : 0;
    if (router_shape_check(n_expert, k, G, n_group_used, err) < 0)
        return -1;
    if (n_embd <= 0 || ((uintptr_t)W | w_stride) % sizeof(float))
        return guild_err_set(err, "cuda: router (fused): rows of %d floats, %zu bytes apart", n_embd, w_stride);
    const size_t smem = (size_t)ROUTER_WARPS * (size_t)(2 * n_expert + G) * sizeof(float);
    const unsigned blocks = (unsigned)((n_expert + ROUTER_WARPS - 1) / ROUTER_WARPS);
    const size_t xs = (size_t)ldx * sizeof(float);
#define RF_LAUNCH(NC)                                                                                              \
    cuda_launch_pdl(router_fused_kernel<NC>, blocks, ROUTER_WARPS * WARP_SIZE, smem, s, W, w_stride, x, xs, n_embd, \
                    logits, n_tok, n_expert, k, G, n_group_used, renorm, scale, ids, w, counts, done)
    if (n_tok == 1)
        RF_LAUNCH(1);
    else if (n_tok == 2)
        RF_LAUNCH(2);
    else
        RF_LAUNCH(4);
#undef RF_LAUNCH
    return cuda_launch_check("router (fused)", err);
}
