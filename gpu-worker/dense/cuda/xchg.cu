/* cuda_xchg_*: the device side of the MoE exchange (contract in cuda_xchg.h). The arena is host memory: its
 * doorbells are read with system-scope acquire loads and rung with a system-scope release store, the slot's
 * inputs are fenced at system scope before the ring, and y is read with volatile loads (the CPU workers wrote it
 * after the device last looked).
 *
 * Every kernel here is launched with programmatic dependent launch (cuda_launch_pdl) and calls pdl_begin() before
 * it touches anything: its launch overlaps the kernel before (the router before publish, the wait before take_y),
 * and the kernel after it (the wait, the next layer's norm) may launch while it runs. Where the wait kernel of the
 * exchange before has seen every done counter at seq (cuda_xchg_dev_t.waited), publish knows its slot is free and
 * reads no counter over the bus. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/cuda_xchg.h"
#include "gpu-worker/dense/cuda/xchg_dev.cuh"

#define XP_THREADS 256
#define XP_MAX_BLOCKS 64    /* publish: a decode step's 8 KiB take one block, a prefill chunk's megabytes 64 */
#define XY_MAX_BLOCKS 1024

static __global__ void __launch_bounds__(XP_THREADS)
    xchg_publish_kernel(cuda_xchg_view_t v, cuda_xchg_dev_t *d, int layer, int n_tok, int64_t n_x, int64_t n_k,
                        const float *__restrict__ x, const int32_t *__restrict__ ids)
{
    __shared__ int s_code;
    pdl_begin();
    /* Nothing in this kernel writes failed or seq before every block has arrived: every block sees the same. */
    if (d->failed)
        return;
    const unsigned long long seq = d->seq + 1;
    if (threadIdx.x < WARP_SIZE) {
        const int code = xchg_slot_known_free(v, seq, d->waited)
                             ? CUDA_XCHG_OK
                             : wait_done_warp(v, seq - (unsigned long long)v.layout.n_slots);
        if (threadIdx.x == 0)
            s_code = code;
    }
    __syncthreads();
    const int code = s_code;
    char *slot = slot_at(v, seq);
    if (code == CUDA_XCHG_OK) {
        const int64_t tid = (int64_t)blockIdx.x * XP_THREADS + threadIdx.x, stride = (int64_t)gridDim.x * XP_THREADS;
        float *sx = (float *)(slot + v.layout.x_off);
        if (n_x % 4 == 0) {
            const float4 *x4 = (const float4 *)x;
            float4 *s4 = (float4 *)sx;
            for (int64_t i = tid; i < n_x / 4; i += stride)
                s4[i] = x4[i];
        } else {
            for (int64_t i = tid; i < n_x; i += stride)
                sx[i] = x[i];
        }
        int32_t *sid = (int32_t *)(slot + v.layout.ids_off);
        for (int64_t i = tid; i < n_k; i += stride)
            sid[i] = ids[i];
    }
    __threadfence_system(); /* this thread's slot writes reach the host before the ring below */
    __syncthreads();
    if (threadIdx.x == 0) {
        if (code != CUDA_XCHG_OK)
            atomicOr(&d->reserved, (unsigned)code);
        __threadfence();
        const unsigned prev = atomicAdd(&d->arrive, 1u);
        if (prev == gridDim.x - 1) { /* the last block: every share is written and fenced */
            __threadfence();
            d->arrive = 0;
            const unsigned fc = atomicExch(&d->reserved, 0u);
            if (fc) {
                xchg_fail(v, d, layer, seq, fc);
            } else {
                xchg_header(v, seq, n_tok, layer);
                __threadfence_system();
                xchg_ring(v, d, seq);
            }
        }
    }
}

static __global__ void xchg_wait_kernel(cuda_xchg_view_t v, cuda_xchg_dev_t *d, int layer)
{
    pdl_begin();
    if (d->failed)
        return;
    const unsigned long long seq = d->seq;
    const uint64_t t0 = now_ns();
    const int code = wait_done_warp(v, seq);
    if (threadIdx.x == 0) {
        if (code != CUDA_XCHG_OK) {
            d->failed = (uint32_t)code;
            d->fail_layer = layer;
            d->fail_seq = seq;
        } else {
            d->wait_ns += now_ns() - t0;
            d->exchanges++;
            d->waited = seq;
            d->y = (const float *)(slot_at(v, seq) + v.layout.y_off);
        }
    }
}

/* The hint on the slot of the exchange last published, picked as the host picks it (guild_exchange_hint_pick): a
 * few tokens' on one thread; a batched step's rows of each entry counted by the block's threads
 * (guild_exchange_hint_rows: n_tok x n_used compares each), then kept in order by thread 0
 * (guild_exchange_hint_pick_batch). No id left (every predicted expert computed by the device): no hint. */
#define XH_THREADS 256
#define XH_ENTRIES 512 /* a batched step's prediction the block counts in shared memory (n_tok x n_used) */
static __global__ void xchg_hint_kernel(cuda_xchg_view_t v, const cuda_xchg_dev_t *d, int layer, int n_tok,
                                        int n_used, int n_pre, const int32_t *__restrict__ ids)
{
    __shared__ int32_t rows[XH_ENTRIES];
    pdl_begin();
    if (d->failed)
        return;
    const int32_t n_all = n_tok * n_used;
    const bool batched = n_tok > (int32_t)GUILD_EXCHANGE_HINT_RANK_TOKENS && n_all <= XH_ENTRIES;
    if (batched) {
        for (int32_t i = threadIdx.x; i < n_all; i += blockDim.x)
            rows[i] = guild_exchange_hint_rows(n_tok, n_used, ids, i);
        __syncthreads();
    }
    if (threadIdx.x)
        return;
    int32_t pick[GUILD_EXCHANGE_HINT_MAX];
    const int32_t n = batched ? guild_exchange_hint_pick_batch(n_tok, n_used, n_pre, ids, rows, pick)
                              : guild_exchange_hint_pick(n_tok, n_used, n_pre, ids, pick);
    if (!n)
        return;
    const unsigned long long seq = d->seq;
    volatile guild_exchange_slot_header_t *h = (volatile guild_exchange_slot_header_t *)slot_at(v, seq);
    for (int32_t i = 0; i < n; i++)
        h->hint_ids[i] = (int16_t)(pick[i] > 32767 ? -1 : pick[i]);
    h->hint_layer = layer;
    h->n_hint = n;
    __threadfence_system();
    st_release_sys((unsigned long long *)&h->hint_seq, seq);
}

static __global__ void xchg_take_y_kernel(cuda_xchg_view_t v, const cuda_xchg_dev_t *d, int64_t n, float *y)
{
    pdl_begin();
    if (d->failed)
        return;
    const unsigned long long seq = d->seq;
    const float *src = (const float *)(slot_at(v, seq) + v.layout.y_off);
    const int64_t tid = (int64_t)blockIdx.x * XP_THREADS + threadIdx.x, stride = (int64_t)gridDim.x * XP_THREADS;
    if (n % 4 == 0) {
        const float4 *s4 = (const float4 *)src;
        float4 *y4 = (float4 *)y;
        for (int64_t i = tid; i < n / 4; i += stride)
            y4[i] = __ldcv(s4 + i);
    } else {
        for (int64_t i = tid; i < n; i += stride)
            y[i] = __ldcv(src + i);
    }
}

/* take_y for the pairs p with ids[p] >= 0 only (a block per pair): a split layer's CPU rows, without moving the
 * device's rows over PCIe. */
static __global__ void xchg_take_y_rows_kernel(cuda_xchg_view_t v, const cuda_xchg_dev_t *d, const int32_t *ids,
                                               int64_t n_embd, float *y)
{
    const int64_t p = blockIdx.x;
    pdl_begin();
    if (d->failed || ids[p] < 0)
        return;
    const float *src = (const float *)(slot_at(v, d->seq) + v.layout.y_off) + p * n_embd;
    float *dst = y + p * n_embd;
    if (n_embd % 4 == 0)
        for (int64_t i = threadIdx.x; i < n_embd / 4; i += blockDim.x)
            ((float4 *)dst)[i] = __ldcv((const float4 *)src + i);
    else
        for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x)
            dst[i] = __ldcv(src + i);
}

static int check_view(const cuda_xchg_view_t *v, guild_err_t *err)
{
    const guild_exchange_layout_t *l = &v->layout;
    if (!v->base || !v->cancel || v->n_workers < 1 || l->n_slots < 1 ||
        ((uintptr_t)v->base | l->slot_off | l->slot_stride | l->x_off | l->y_off) % 16)
        return guild_err_set(err, "cuda: exchange: bad device view of the arena");
    return 0;
}

static unsigned blocks_for(int64_t n, unsigned cap)
{
    const int64_t b = (n + 4 * XP_THREADS - 1) / (4 * XP_THREADS);
    return b < 1 ? 1u : b > (int64_t)cap ? cap : (unsigned)b;
}

extern "C" int cuda_xchg_publish(const cuda_xchg_view_t *v, cuda_xchg_dev_t *d, int32_t layer, int32_t n_tok,
                                 int64_t n_embd, int32_t n_used, const float *x, const int32_t *ids, cudaStream_t s,
                                 guild_err_t *err)
{
    if (check_view(v, err) < 0)
        return -1;
    if (n_tok < 1 || n_tok > v->max_tokens)
        return guild_err_set(err, "cuda: exchange: %d tokens, the slots hold %d", n_tok, v->max_tokens);
    const int64_t n_x = (int64_t)n_tok * n_embd, n_k = (int64_t)n_tok * n_used;
    cuda_launch_pdl(xchg_publish_kernel, blocks_for(n_x, XP_MAX_BLOCKS), XP_THREADS, 0, s, *v, d, layer, n_tok, n_x,
                    n_k, x, ids);
    return cuda_launch_check("exchange publish", err);
}

extern "C" int cuda_xchg_wait(const cuda_xchg_view_t *v, cuda_xchg_dev_t *d, int32_t layer, cudaStream_t s,
                              guild_err_t *err)
{
    if (check_view(v, err) < 0)
        return -1;
    cuda_launch_pdl(xchg_wait_kernel, 1, WARP_SIZE, 0, s, *v, d, layer);
    return cuda_launch_check("exchange wait", err);
}

extern "C" int cuda_xchg_take_y_rows(const cuda_xchg_view_t *v, cuda_xchg_dev_t *d, const int32_t *ids,
                                     int32_t n_pairs, int64_t n_embd, float *y, cudaStream_t s, guild_err_t *err)
{
    if (check_view(v, err) < 0)
        return -1;
    if (n_pairs <= 0)
        return 0;
    cuda_launch_pdl(xchg_take_y_rows_kernel, (unsigned)n_pairs, 256, 0, s, *v, d, ids, n_embd, y);
    return cuda_launch_check("exchange take y rows", err);
}

extern "C" int cuda_xchg_hint(const cuda_xchg_view_t *v, cuda_xchg_dev_t *d, int32_t layer, int32_t n_tok,
                              int32_t n_used, int32_t n_pre, const int32_t *ids, cudaStream_t s, guild_err_t *err)
{
    if (check_view(v, err) < 0)
        return -1;
    if (n_tok < 1 || n_pre < 1)
        return 0;
    const unsigned threads = n_tok > (int32_t)GUILD_EXCHANGE_HINT_RANK_TOKENS ? XH_THREADS : 1;
    cuda_launch_pdl(xchg_hint_kernel, 1, threads, 0, s, *v, d, layer, n_tok, n_used, n_pre, ids);
    return cuda_launch_check("exchange hint", err);
}

extern "C" int cuda_xchg_take_y(const cuda_xchg_view_t *v, cuda_xchg_dev_t *d, int64_t n_floats, float *y,
                                cudaStream_t s, guild_err_t *err)
{
    if (check_view(v, err) < 0)
        return -1;
    if (n_floats <= 0)
        return 0;
    cuda_launch_pdl(xchg_take_y_kernel, blocks_for(n_floats, XY_MAX_BLOCKS), XP_THREADS, 0, s, *v, d, n_floats, y);
    return cuda_launch_check("exchange take y", err);
}
