/* gpu-worker/dense/cuda/xchg_dev.cuh — the MoE exchange as device code sees it (cuda_xchg.h's contract): the
 * arena's doorbells and slots at a view's device address, system-scope acquire loads and release stores, the
 * warp that waits for the CPU workers' done counters, and the publish of a lone token's row by the kernel that
 * chose its experts (the router's cluster form, router.cu), which xchg.cu's publish kernel otherwise does. */
#ifndef GUILD_GPU_WORKER_CUDA_XCHG_DEV_CUH
#define GUILD_GPU_WORKER_CUDA_XCHG_DEV_CUH

#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/cuda_xchg.h"

static __device__ __forceinline__ unsigned long long ld_acquire_sys(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void st_release_sys(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

static __device__ __forceinline__ uint64_t now_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The layout's places (ipc/exchange_layout.h) at the view's device address. */
static __device__ __forceinline__ unsigned long long *step_at(const cuda_xchg_view_t &v)
{
    return (unsigned long long *)(v.base + v.layout.step_off);
}

static __device__ __forceinline__ const unsigned long long *done_at(const cuda_xchg_view_t &v, int k)
{
    return (const unsigned long long *)(v.base + guild_exchange_done_at(&v.layout, (uint32_t)k));
}

static __device__ __forceinline__ char *slot_at(const cuda_xchg_view_t &v, unsigned long long seq)
{
    return v.base + guild_exchange_slot_at(&v.layout, seq);
}

/* Called by one whole warp: CUDA_XCHG_OK once every done[k] >= target, else the reason it gave up. A round reads
 * the cancel flag (host memory too) with the done counters, not after them: one trip over the bus a round, so the
 * done counter that ends the wait is seen half a trip sooner on average. */
static __device__ int wait_done_warp(const cuda_xchg_view_t &v, unsigned long long target)
{
    const int lane = threadIdx.x % WARP_SIZE;
    const uint64_t t0 = now_ns();
    for (;;) {
        const unsigned cancel = lane == 0 ? *(volatile const unsigned *)v.cancel : 0u;
        bool ok = true;
        for (int k = lane; k < v.n_workers; k += WARP_SIZE)
            if (ld_acquire_sys(done_at(v, k)) < target)
                ok = false;
        if (__all_sync(FULL_MASK, ok))
            return CUDA_XCHG_OK;
        int code = CUDA_XCHG_OK;
        if (lane == 0) {
            if (cancel)
                code = CUDA_XCHG_CANCELLED;
            else if (now_ns() - t0 > v.timeout_ns)
                code = CUDA_XCHG_TIMEOUT;
        }
        code = __shfl_sync(FULL_MASK, code, 0);
        if (code)
            return code;
    }
}

/* Whether the slot of exchange seq is free without a look at the done counters: the ring's first n_slots, or a wait
 * kernel saw every done counter at `waited` >= seq - n_slots (done counters only grow). */
static __device__ __forceinline__ bool xchg_slot_known_free(const cuda_xchg_view_t &v, unsigned long long seq,
                                                            unsigned long long waited)
{
    const unsigned long long n_slots = v.layout.n_slots;
    return seq <= n_slots || waited + n_slots >= seq;
}

/* One thread: the slot's header of exchange seq (before the fence that precedes the ring). */
static __device__ __forceinline__ void xchg_header(const cuda_xchg_view_t &v, unsigned long long seq, int n_tok,
                                                   int layer)
{
    volatile guild_exchange_slot_header_t *h = (volatile guild_exchange_slot_header_t *)slot_at(v, seq);
    h->seq = seq;
    h->n_tokens = n_tok;
    h->layer = layer;
}

/* One thread, once every write of the slot is fenced: the ring, a system-scope release store of the step doorbell;
 * seq counted. */
static __device__ __forceinline__ void xchg_ring(const cuda_xchg_view_t &v, cuda_xchg_dev_t *d,
                                                 unsigned long long seq)
{
    st_release_sys(step_at(v), seq);
    d->seq = seq;
}

/* One thread: the failure fc (a CUDA_XCHG_* code, or several ORed) of publishing exchange seq, recorded once for
 * the step. */
static __device__ __forceinline__ void xchg_fail(const cuda_xchg_view_t &v, cuda_xchg_dev_t *d, int layer,
                                                 unsigned long long seq, unsigned fc)
{
    d->failed = (fc & CUDA_XCHG_CANCELLED) ? CUDA_XCHG_CANCELLED : CUDA_XCHG_TIMEOUT;
    d->fail_layer = layer;
    d->fail_seq = seq - (unsigned long long)v.layout.n_slots;
}

/* ---- a lone token published by another kernel's block (cuda_xchg_pub_t) ----------------------------------------
 * The steps of xchg_publish_kernel for one token in one block: claim (every thread, after pdl_begin), the row
 * (every thread), the ids (the lanes of one warp) and the header (one of them), a system-scope fence by every
 * thread of the block at once (one round: a fence waits for the bus), a barrier, then the ring (one thread; the
 * block's writes reach the host before it: each thread's fence, then the barrier before the release store), or the
 * failure recorded. */
#define CUDA_XCHG_SKIP (-1) /* a failure earlier in the step: nothing published */

/* The counters the claim needs, loaded by every thread of the block after the wait on the kernel before (pdl_begin)
 * and as early as it can: their latency then hides behind the kernel's own first loads. */
typedef struct xchg_pub_counters {
    unsigned failed;
    unsigned long long seq, waited;
} xchg_pub_counters_t;

static __device__ __forceinline__ xchg_pub_counters_t xchg_pub_load(const cuda_xchg_pub_t &p)
{
    return {p.d->failed, p.d->seq, p.d->waited};
}

/* Every thread of the block: the exchange it publishes (*seq) and CUDA_XCHG_OK once its slot is free (known from
 * `waited` in a decode step, else warp 0 waits on the done counters and the block's barrier shares the answer),
 * CUDA_XCHG_SKIP after an earlier failure, or the reason it gave up. Nothing writes the counters before the ring. */
static __device__ int xchg_pub_claim(const cuda_xchg_pub_t &p, const xchg_pub_counters_t &c, unsigned long long *seq,
                                     int *sh_code)
{
    if (c.failed)
        return CUDA_XCHG_SKIP;
    *seq = c.seq + 1;
    if (xchg_slot_known_free(p.view, *seq, c.waited))
        return CUDA_XCHG_OK;
    if (threadIdx.x < WARP_SIZE) {
        const int code = wait_done_warp(p.view, *seq - (unsigned long long)p.view.layout.n_slots);
        if (threadIdx.x == 0)
            *sh_code = code;
    }
    __syncthreads();
    return *sh_code;
}

/* The block's threads copy the token's row (n floats, e.g. shared memory) into the slot of exchange seq. */
static __device__ __forceinline__ void xchg_pub_row(const cuda_xchg_pub_t &p, unsigned long long seq,
                                                    const float *row, int n)
{
    float *sx = (float *)(slot_at(p.view, seq) + p.view.layout.x_off);
    if (n % 4 == 0 && (uintptr_t)row % 16 == 0)
        for (int i = threadIdx.x; i < n / 4; i += blockDim.x)
            ((float4 *)sx)[i] = ((const float4 *)row)[i];
    else
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            sx[i] = row[i];
}

/* Slot `slot` of the token's experts (one thread each). */
static __device__ __forceinline__ void xchg_pub_id(const cuda_xchg_pub_t &p, unsigned long long seq, int slot,
                                                   int32_t id)
{
    ((int32_t *)(slot_at(p.view, seq) + p.view.layout.ids_off))[slot] = id;
}

/* One thread, with the ids (before the writers' fences): the slot's header. */
static __device__ __forceinline__ void xchg_pub_header(const cuda_xchg_pub_t &p, unsigned long long seq)
{
    xchg_header(p.view, seq, 1, p.layer);
}

/* One thread, after every writer's fence and a barrier (the header's writer among them): the ring. */
static __device__ __forceinline__ void xchg_pub_ring(const cuda_xchg_pub_t &p, unsigned long long seq)
{
    xchg_ring(p.view, p.d, seq);
}

/* One thread: the claim's failure, as xchg_publish_kernel records one. */
static __device__ __forceinline__ void xchg_pub_fail(const cuda_xchg_pub_t &p, unsigned long long seq, int code)
{
    xchg_fail(p.view, p.d, p.layer, seq, (unsigned)code);
}

#endif
