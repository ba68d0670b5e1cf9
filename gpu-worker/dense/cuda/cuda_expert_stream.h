/* gpu-worker/dense/cuda/cuda_expert_stream.h — internal to the "gpu" bridge (cuda_moe_gpu.c): the staging slots
 * on the device through which the experts the CPU side holds are streamed over PCIe, and the order in which a
 * forward pass fills them.
 *
 * A pass queues, layer by layer, the experts each streamed layer computes on the device (xs_add_layer); the
 * queue is cut into chunks of at most one slot each (a whole layer when a slot holds one, else slices of
 * consecutive experts), chunk i going to slot i mod n_slots. The copy stream runs ahead of the products: a
 * chunk's copies are enqueued as soon as the products of the chunk that last used its slot are enqueued (the
 * copies wait for them on the device), so with n_slots slots the copies of the next layers proceed while this
 * layer computes and the copy engine does not wait for the host. Copies read the host memory the sources name
 * (the CPU side's own copies, registered for DMA by the stage, gpu-worker/dense/cuda/cuda_stage.h); a layer whose
 * copies are packed (core/kern/pack.h) is unpacked on the device after its copies (a third stream), so the
 * kernels read plain rows, the same bytes as the file's.
 *
 * Device layout of a chunk of m experts in its slot: as the host's expert records when the source lays each
 * expert's matrices out together (gate, up, down at fixed offsets; one copy per run of consecutive experts),
 * else three regions (gate, up, down of the m experts each), one copy per run and matrix. Local expert j of the
 * chunk (rank lo + j of the layer's device experts) is at gate + j * gu_stride, down + j * d_stride.
 *
 * Timing: each chunk's copies (events on the copy stream) and the compute stream's wait for them are timed;
 * xs_pass_end folds a finished pass into the counters. One host thread. */
#ifndef GUILD_GPU_WORKER_CUDA_EXPERT_STREAM_H
#define GUILD_GPU_WORKER_CUDA_EXPERT_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/quant/types.h"
#include "core/util/err.h"
#include "gpu-worker/dense/expert_host.h"

struct cuda_stage;
typedef struct xs xs_t;

/* A layer whose experts may stream: their types and shapes, and where each expert is on the host. */
typedef struct xs_layer_desc {
    guild_type_t gate_type, down_type; /* up has gate_type */
    int64_t n_embd, n_ff;
    size_t gate_rb, down_rb;           /* plain row bytes */
    const expert_host_mats_t *src;     /* [n_expert]; gate NULL: that expert does not stream; src NULL: the layer
                                          does not stream */
} xs_layer_desc_t;

/* A staged chunk as the products read it. */
typedef struct xs_chunk {
    int32_t layer, lo, hi;             /* ranks [lo, hi) of the layer's device experts */
    const char *gate, *up, *down;      /* device */
    size_t gu_stride, d_stride;        /* between experts */
    size_t gate_row, down_row;         /* between rows (gate and up share theirs) */
    int32_t index;                     /* in the pass */
} xs_chunk_t;

/* Counters since creation. */
typedef struct xs_stats {
    uint64_t passes;         /* forward passes that streamed */
    uint64_t chunks, bytes;  /* copied */
    uint64_t copy_ns;        /* the copy engine busy with them (device time) */
    uint64_t wait_ns;        /* the compute stream waiting for them */
    uint64_t unpacked;       /* chunks unpacked on the device */
} xs_stats_t;

/* Slots of slot_bytes (a multiple of 256) for layers[0..n_layer) (NULL src: not streamed; device memory is
 * counted into *bytes); copies through stage (borrowed). -1 with a message when a streamed layer's sources
 * cannot be laid out (mixed layouts, unequal gate/up rows) or a slot cannot hold one expert of it, or on
 * device memory. */
int xs_new(xs_t **out, const xs_layer_desc_t *layers, int32_t n_layer, int32_t n_expert, size_t slot_bytes,
           int32_t n_slots, struct cuda_stage *stage, size_t *bytes, guild_err_t *err);
void xs_destroy(xs_t **xs);

/* Replaces the stage (between passes). */
void xs_set_stage(xs_t *xs, struct cuda_stage *stage);

/* Whether layer il can stream, and the bytes each of its experts copies. */
bool xs_layer_streams(const xs_t *xs, int32_t il);
uint64_t xs_expert_bytes(const xs_t *xs, int32_t il);

/* Starts a pass's queue (the last pass must be over: its stream synchronized). */
void xs_pass_begin(xs_t *xs);

/* Queues layer il's experts ids[0..n) (increasing), device ranks rank0 .. rank0 + n - 1; layers in the order
 * the pass computes them. -1 with a message when one does not stream. */
int xs_add_layer(xs_t *xs, int32_t il, const int32_t *ids, int32_t n, int32_t rank0, guild_err_t *err);

/* Enqueues the copies the slots allow now (call after queueing the pass's layers and after each xs_done). */
int xs_pump(xs_t *xs, guild_err_t *err);

/* The next chunk of the queue, which must belong to layer il (0 with *c), or 1 when the layer has no chunk
 * left. Makes stream s wait for its copies (timed). */
int xs_next(xs_t *xs, int32_t il, cudaStream_t s, xs_chunk_t *c, guild_err_t *err);

/* The chunk's products are enqueued on s: its slot may be refilled after them. Pumps. */
int xs_done(xs_t *xs, const xs_chunk_t *c, cudaStream_t s, guild_err_t *err);

/* After the pass's stream has completed: folds its timings into the counters; copy_ns, bytes: this pass's
 * (for the cost estimates). */
void xs_pass_end(xs_t *xs, uint64_t *copy_ns, uint64_t *bytes);

void xs_stats(const xs_t *xs, xs_stats_t *out);

/* The compute stream's wait for layer il's copies in the pass xs_pass_end folded last, ns. */
double xs_layer_wait_ns(const xs_t *xs, int32_t il);

/* Copies one slot's worth of layer il's experts twice and returns the bytes per ns of the second (0 when the
 * layer does not stream); the slot's contents are garbage afterwards. -1 with err. */
int xs_probe(xs_t *xs, int32_t il, double *bpns, guild_err_t *err);

#endif
