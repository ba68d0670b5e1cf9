/* gpu-worker/dense/cuda/cuda_xchg.h — the device side of the MoE exchange (ipc/exchange.h): kernels that publish a
 * layer's routed tokens into the arena's slot and wait for the CPU workers' done counters, so no host thread is
 * on the path and a whole decode step can be one CUDA graph. Callable from C (gpu-worker/dense/cuda/cuda_moe_xchg.c,
 * the device-driven "xchg" executor).
 *
 * The arena is host memory registered with cudaHostRegister(Mapped | Portable); `view` holds the exchange
 * region's device address and its layout (ipc/exchange_layout.h: the offsets the host code uses too). Sequence
 * numbers live on the device (cuda_xchg_dev_t), so a captured graph replays with the next numbers:
 *   publish  every block first waits until the slot of seq + 1 is free (done[k] >= seq + 1 - n_slots, acquire
 *            loads at system scope; none where a wait kernel has seen that much: `waited`), copies its share of
 *            x/ids into the slot, fences at system scope; the last block writes the slot header, then
 *            `step = seq + 1` with a system-scope release store, and seq += 1. A decode step's lone token may be
 *            published by the router's launch instead (cuda_xchg_pub_t below), with the same writes and ring.
 *   wait     one warp spins on done[k] >= seq for every worker with system-scope acquire loads; adds its time
 *            (%globaltimer) to wait_ns, sets waited = seq and y = the slot's y rows (what a kernel after it may
 *            read in place of take_y's copy: cuda_moe_combine_at). It gives up when the host raises *view.cancel
 *            or after timeout_ns.
 *   take_y   copies the slot's y rows of exchange seq (volatile loads: the CPU wrote them) into device memory.
 *   hint     (a prefetch hint, after publish) writes the ids of the predicted experts (>= 0) that
 *            guild_exchange_hint_pick takes with n_pre (a few tokens: each one's first n_pre, rank-major; a batched
 *            step: the n_pre most tokens route to) into the header of exchange seq's slot, fences at system scope,
 *            then hint_seq = seq with a system-scope release store (ipc/exchange.h); none >= 0: nothing written.
 * A failure (timeout, cancel) is recorded once in `failed` and makes every later bridge kernel a no-op until
 * the host clears it (cuda_xchg_dev_t.failed = 0) before the next step; the step's results are then garbage and
 * the host reports the failure instead of them. An exchange published before a failure still completes on the
 * CPU workers: the next publish waits for its slot as usual.
 */
#ifndef GUILD_GPU_WORKER_CUDA_XCHG_H
#define GUILD_GPU_WORKER_CUDA_XCHG_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "ipc/exchange_layout.h"

#ifdef __cplusplus
#define _Noreturn [[noreturn]]
extern "C" {
#endif
#include "core/util/err.h"
#ifdef __cplusplus
#undef _Noreturn
#endif

enum {
    CUDA_XCHG_OK = 0,
    CUDA_XCHG_TIMEOUT = 1,   /* the CPU workers did not complete (or free the slot) within timeout_ns */
    CUDA_XCHG_CANCELLED = 2, /* the host raised the cancel flag */
};

/* Device memory, one per bridge; the host reads a copy after each step (cuda_xchg_mirror). */
typedef struct cuda_xchg_dev {
    uint64_t seq;        /* last exchange published by this device (the arena's step) */
    uint64_t wait_ns;    /* device time in wait kernels, summed */
    uint64_t exchanges;  /* waits completed */
    uint64_t fail_seq;   /* the exchange the first failure waited for */
    uint32_t failed;     /* CUDA_XCHG_OK, or the first failure's code */
    int32_t fail_layer;  /* its layer */
    uint32_t arrive;     /* publish: blocks done with their share (the last one resets it) */
    uint32_t reserved;
    uint64_t waited;     /* the last exchange a wait kernel saw done by every worker (0: none yet) */
    const float *y;      /* that exchange's rows: its slot's y (a device address in the arena; slot 0's before) */
} cuda_xchg_dev_t;

/* The exchange as the device sees it. */
typedef struct cuda_xchg_view {
    char *base;                     /* the exchange region's start, a device address in the registered arena */
    guild_exchange_layout_t layout; /* where everything lies from base (ipc/exchange_layout.h) */
    int32_t n_workers, max_tokens;
    const unsigned *cancel;         /* host flag in mapped memory: nonzero gives up every wait */
    uint64_t timeout_ns;            /* longest wait of one kernel */
} cuda_xchg_view_t;

/* A lone token's exchange published by the launch that chooses its experts (the router's cluster form,
 * cuda_router_fused_norm) instead of cuda_xchg_publish: the same slot writes and ring, in that kernel's first block
 * (gpu-worker/dense/cuda/xchg_dev.cuh). */
typedef struct cuda_xchg_pub {
    cuda_xchg_view_t view;
    cuda_xchg_dev_t *d;
    int32_t layer;
} cuda_xchg_pub_t;

/* Enqueue the kernels described above. n_tok <= view->max_tokens; x: [n_tok][n_embd], ids: [n_tok][n_used];
 * y: [n_tok][n_used][n_embd] (device memory). -1 with a message on a bad argument or launch failure. */
int cuda_xchg_publish(const cuda_xchg_view_t *v, cuda_xchg_dev_t *d, int32_t layer, int32_t n_tok, int64_t n_embd,
                      int32_t n_used, const float *x, const int32_t *ids, cudaStream_t s, guild_err_t *err);
int cuda_xchg_wait(const cuda_xchg_view_t *v, cuda_xchg_dev_t *d, int32_t layer, cudaStream_t s, guild_err_t *err);
int cuda_xchg_take_y(const cuda_xchg_view_t *v, cuda_xchg_dev_t *d, int64_t n_floats, float *y, cudaStream_t s,
                     guild_err_t *err);
/* ids: [n_tok][n_used] (device), the experts predicted for `layer` (< 0: none the CPU workers compute); those
 * guild_exchange_hint_pick takes with n_pre (guild_exchange_hint_per's count) travel. */
int cuda_xchg_hint(const cuda_xchg_view_t *v, cuda_xchg_dev_t *d, int32_t layer, int32_t n_tok, int32_t n_used,
                   int32_t n_pre, const int32_t *ids, cudaStream_t s, guild_err_t *err);
/* take_y of the rows of the pairs p < n_pairs whose ids[p] (device) is >= 0 only: y[p][0..n_embd); the other
 * rows of y untouched. */
int cuda_xchg_take_y_rows(const cuda_xchg_view_t *v, cuda_xchg_dev_t *d, const int32_t *ids, int32_t n_pairs,
                          int64_t n_embd, float *y, cudaStream_t s, guild_err_t *err);

#ifdef __cplusplus
}
#endif

#endif
