/* cuda_logits_pick: each row's greedy pick (core/sample/logits_pick.h) computed where the logits are, so that a
 * greedy step copies 12 bytes a row to the host instead of n_vocab floats. One block a row; each thread keeps the
 * best (value, id) of a strided slice and the lowest non-finite id it saw, then the block reduces them with the
 * reference's order (a larger value, or an equal one at a lower id): the first index of the maximum, as the
 * scalar scan finds it, whatever the reduction's shape. No arithmetic on the values: the ids are exact. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"

#include <limits.h>

#define PICK_THREADS 1024

/* (bv, bid) of lane 0 becomes the best of the warp's by the reference's order (logits_pick_better), nf the lowest
 * of their non-finite ids. */
static __device__ __forceinline__ void pick_warp_reduce(float &bv, int &bid, int &nf)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_down_sync(0xffffffffu, bv, o);
        const int oid = __shfl_down_sync(0xffffffffu, bid, o), onf = __shfl_down_sync(0xffffffffu, nf, o);
        if (logits_pick_better(ov, oid, bv, bid)) {
            bv = ov;
            bid = oid;
        }
        nf = min(nf, onf);
    }
}

static __global__ void logits_pick_kernel(const float *__restrict__ logits, int n, size_t ld, logits_pick_t *picks)
{
    pdl_begin();
    const float *x = logits + (size_t)blockIdx.x * ld;
    float bv = -INFINITY;
    int bid = INT_MAX, nf = INT_MAX;
    for (int i = threadIdx.x; i < n; i += PICK_THREADS) {
        float v = x[i];
        if (!isfinite(v) && nf == INT_MAX)
            nf = i;
        if (isnan(v))
            v = -INFINITY;
        if (logits_pick_better(v, i, bv, bid)) {
            bv = v;
            bid = i;
        }
    }
    pick_warp_reduce(bv, bid, nf);
    __shared__ float sv[PICK_THREADS / 32];
    __shared__ int sid[PICK_THREADS / 32], snf[PICK_THREADS / 32];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        sv[w] = bv;
        sid[w] = bid;
        snf[w] = nf;
    }
    __syncthreads();
    if (w == 0) {
        bv = sv[lane];
        bid = sid[lane];
        nf = snf[lane];
        pick_warp_reduce(bv, bid, nf);
        if (lane == 0)
            picks[blockIdx.x] = logits_pick_t{bid, nf == INT_MAX ? -1 : nf, nf == INT_MAX ? 0.0f : x[nf]};
    }
}

extern "C" int cuda_logits_pick(const float *logits, int32_t n_rows, int32_t n, size_t ld, logits_pick_t *picks,
                                cudaStream_t s, guild_err_t *err)
{
    if (n_rows <= 0)
        return 0;
    if (n < 1 || ld < (size_t)n)
        return guild_err_set(err, "logits pick: rows of %d in a stride of %zu", n, ld);
    cuda_launch_pdl(logits_pick_kernel, (unsigned)n_rows, PICK_THREADS, 0, s, logits, n, ld, picks);
    return cuda_launch_check("logits pick", err);
}
