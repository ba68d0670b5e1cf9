/* The "gpu" device executor: the routed experts of the layers it holds live in device memory and run there, the
 * others go through a fallback executor (CPU workers or in-process), or are split per expert between that one
 * and the device (gpu-worker/dense/expert_split.h): the device's experts are streamed into one of two staging buffers
 * and run here while the CPU side computes the others (the stager's job, done in the GPU worker; after an
 * all-device batch the next layer's copy, on a copy stream, overlaps this layer's products). See cuda_moe.h.
 *
 * A split batch: the ids come to the host (the plan needs the routing); the CPU side's exchange is submitted
 * first with the device's pairs as skip slots (ids < 0, moe_exec.h), then the copies of the device's experts
 * (each to its own place in the staging buffer: the kernels index experts as in resident memory) and the
 * device's products with the complementary ids, writing their rows of y; collect copies the CPU side's rows
 * into y (cuda_expert_merge). Every row comes from one side, the bits that side gives for the pair alone.
 * The device part's copies (end to end) and products (events) are timed, and the plans use those costs
 * (gpu-worker/dense/expert_cost.h) once measured: timing moves pairs between the sides, never changes a pair's bits.
 *
 * Per resident layer and step: x quantized to the gate's dot type; pairs grouped by expert
 * (cuda_expert_route); h[p] = silu(gate_e x_t) * up_e x_t for every pair p = (t, k) in one kernel; h quantized to
 * the down matrix's dot type; y[p] = down_e h[p]. y is [n][n_used][n_embd] in pair order: what collect returns.
 * gpt-oss's layers (oai) take the gate and up products apart, add the experts' biases and apply swiglu_oai
 * (cuda_expert_swiglu_oai), and add the down bias to y (cuda_expert_add_bias).
 * Each product is cuda_matmul's arithmetic, so y differs from the CPU workers' only through expf in SiLU. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/util/log.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_moe.h"
#include "gpu-worker/dense/cuda/cuda_stage.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/expert_cost.h"
#include "gpu-worker/dense/expert_split.h"
#include "ipc/doorbell.h" /* guild_now_ns */

#define ALIGN 256u
#define TL_N 6 /* split timeline events */
#define FEW_TOKENS 4 /* up to this many tokens a step: one pair per tile (mmvq-style); more: tiles of 8 pairs */
#define MMA_PAIRS_PER_EXPERT 4 /* from this many pairs per expert on average: the int8 tensor-core tiles */

typedef struct gpu_layer {
    const char *gate, *up, *down; /* device; gate NULL: not resident */
    const char *h_gate, *h_up, *h_down; /* host: what streaming copies; NULL: the kernels cannot take the types */
    guild_type_t gate_type, down_type;
    size_t gate_row, gate_mat, down_row, down_mat;
    size_t bytes;                 /* gate, up, down of every expert, each rounded to ALIGN: the staged layout */
    bool oai;                     /* gpt-oss: biases and swiglu_oai (cuda_moe_gpu_layer_t) */
    float alpha, limit;
    const float *gate_b, *up_b, *down_b; /* device, in bias_mem (oai) */
} gpu_layer_t;

typedef struct moe_gpu {
    moe_exec_t base;
    moe_exec_t *fallback;      /* borrowed; layers not resident */
    gpu_layer_t *layers;       /* [n_layer] */
    int32_t n_layer, n_expert, max_tokens, n_embd, n_ff, n_used;
    void *mem;                 /* the resident expert weights */
    void *act_x;               /* [max_tokens] rows of ax_row bytes: x in the gate's dot type */
    size_t ax_row;
    float *h;                  /* [max_tokens * n_used][n_ff] */
    float *u;                  /* [max_tokens * n_used][n_ff]: the up products of oai layers; NULL without */
    void *bias_mem;            /* the oai layers' expert biases */
    void *act_h;               /* [max_tokens * n_used] rows of ah_row bytes: h in the down matrix's dot type */
    size_t ah_row;
    int32_t *order;            /* [max_tokens * n_used] */
    int32_t *tiles;            /* [max tiles][4], 16-byte aligned */
    int32_t *n_tiles;          /* device int */
    float *y;                  /* [max_tokens][n_used][n_embd] */
    bool on_device;            /* the exchange in flight is computed here (wholly, or its device part) */
    bool split_cpu;            /* ... and it has a CPU part to collect and merge */
    int32_t n_pairs;           /* pairs of the exchange in flight */

    /* streaming of the other layers (stream: set up) */
    bool stream;
    char *stage[2];            /* device, each the largest layer's bytes, laid out as the resident layers */
    int32_t stage_layer[2];    /* the layer each holds (or is being filled with); -1: none */
    uint8_t *staged[2];        /* [n_expert] each: the experts of stage_layer[b] copied (or being copied) there */
    int next_stage;
    int32_t last_streamed;     /* the layer whose staged experts the device used last (-1: none) */
    uint64_t prefetched;       /* planned batches whose whole layer was copied before its routing was known */
    cudaStream_t copy;
    cudaEvent_t copied[2], consumed[2];
    double pcie_bpns;          /* measured copy bandwidth, bytes per ns */
    /* the CPU side's time per exchange, a + b * tokens ns, from its counters */
    double cpu_a, cpu_b;
    bool have_a, have_b;
    moe_exec_stats_t fb_last;  /* the fallback's counters at the start of this step */
    int32_t fb_pairs;          /* pairs of the exchanges delegated whole in this step (0: none) */
    bool fb_split;             /* an exchange of this step was split: its wait is not the CPU side's time alone */
    uint64_t streamed, streamed_bytes;
    uint64_t split_gpu_experts, split_cpu_experts, split_gpu_pairs, split_cpu_pairs;
    size_t stage_bytes;        /* the largest streamable layer's */

    /* the split (stream: set up) */
    expert_split_t *split;
    double force_split;        /* tests: < 0 none, else the device's fraction of the pairs */
    int32_t *h_ids;            /* pinned [3][max_tokens * n_used]: the batch's ids, the CPU side's, the device's */
    int32_t *d_ids;            /* device [2][max_tokens * n_used]: the CPU side's ids, the device's */
    cudaEvent_t ids_ready;     /* the batch's ids on the host */
    int32_t *count;            /* [n_expert] pairs of each expert in the batch */
    uint64_t *ebytes;          /* [n_expert] bytes to copy for each */
    uint8_t *on_gpu;           /* [n_expert] the plan */
    cuda_stage_piece_t *pieces; /* [3 * n_expert] */
    cuda_stage_t *stager;      /* the copies' path: borrowed, or own_stager (pageable) */
    cuda_stage_t *own_stager;

    /* the device part's measured costs (stream: set up): one timing pair of each kind in flight at most, read
     * without waiting before the next plan (or at the next step) and folded into the estimates the plan uses */
    expert_cost_t gpu_cost;    /* ns per device pair of the products */
    expert_cost_t copy_cost;   /* ns per byte of a planned batch's copies, end to end */
    cudaEvent_t run_t[2];      /* timing: before, after the products (compute stream) */
    cudaEvent_t copy_t[2];     /* timing: before, after the copies (copy stream) */
    bool run_timed, copy_timed; /* the pair recorded, not read yet */
    int64_t run_pairs;         /* the timed products' device pairs */
    uint64_t copy_bytes, copy_host_ns; /* the timed copies' bytes; the host's time in cuda_stage_copy for them */
    bool gpu_cost_logged, copy_cost_logged;

    /* where a split batch's time goes (logged at the end): events on the compute stream at the ids on the
     * host, the CPU side's exchange posted, the device's products started (its copies waited for) and done, the
     * CPU side's rows collected, merged; summed over the batches whose events were all read */
    cudaEvent_t tl[TL_N], tl_next; /* tl_next: the next batch's ids, swapped into tl[0] once read */
    bool tl_on, tl_pending;    /* recording this batch's; a recorded batch not read yet */
    double tl_sum[TL_N];       /* ms: [i] from event i-1 to i; [0] from the last batch's merge to these ids */
    double tl_host_plan, tl_host_stage; /* ms on the host: ids to the exchange posted; in stage_load */
    int64_t tl_count;
} moe_gpu_t;

/* The experts `want` ([n_expert]; NULL: all) of layer `layer` in a staging buffer, each at its place in the
 * resident layout: the buffer already holding the layer gets the missing ones, else the other buffer (never
 * the one holding `keep`) is refilled after its last use. Copies go on the copy stream; copied[*buf] follows
 * them. timed: a planned batch's own copies, timed (copy_t) unless a timing is still unread. */
static int stage_load(moe_gpu_t *m, int32_t layer, int32_t keep, const uint8_t *want, bool timed, int *buf,
                      guild_err_t *err)
{
    int b = -1;
    for (int i = 0; i < 2; i++)
        if (m->stage_layer[i] == layer)
            b = i;
    if (b < 0) {
        b = keep >= 0 && m->stage_layer[0] == keep ? 1 : keep >= 0 && m->stage_layer[1] == keep ? 0 : m->next_stage;
        m->next_stage = b ^ 1;
        m->stage_layer[b] = -1;
        memset(m->staged[b], 0, (size_t)m->n_expert);
    }
    *buf = b;
    const gpu_layer_t *L = &m->layers[layer];
    const size_t gr = (L->gate_mat * (size_t)m->n_expert + ALIGN - 1) / ALIGN * ALIGN;
    /* runs of consecutive missing experts: one piece per matrix each */
    int32_t np = 0;
    size_t bytes = 0;
    for (int32_t e = 0; e < m->n_expert;) {
        if ((want && !want[e]) || m->staged[b][e]) {
            e++;
            continue;
        }
        int32_t e1 = e + 1;
        while (e1 < m->n_expert && (!want || want[e1]) && !m->staged[b][e1])
            e1++;
        const size_t ne = (size_t)(e1 - e);
        m->pieces[np++] = (cuda_stage_piece_t){L->h_gate + (size_t)e * L->gate_mat, ne * L->gate_mat,
                                               (size_t)e * L->gate_mat};
        m->pieces[np++] = (cuda_stage_piece_t){L->h_up + (size_t)e * L->gate_mat, ne * L->gate_mat,
                                               gr + (size_t)e * L->gate_mat};
        m->pieces[np++] = (cuda_stage_piece_t){L->h_down + (size_t)e * L->down_mat, ne * L->down_mat,
                                               2 * gr + (size_t)e * L->down_mat};
        bytes += ne * (2 * L->gate_mat + L->down_mat);
        memset(m->staged[b] + e, 1, ne);
        e = e1;
    }
    m->stage_layer[b] = layer;
    if (np == 0)
        return 0; /* all there: copied[b] already follows their copies */
    timed = timed && !m->copy_timed;
    uint64_t host_ns = 0;
    if (cuda_check(cudaStreamWaitEvent(m->copy, m->consumed[b], 0), "stage wait", err) < 0 ||
        (timed && cuda_check(cudaEventRecord(m->copy_t[0], m->copy), "timing event", err) < 0))
        goto fail;
    host_ns = guild_now_ns();
    if (cuda_stage_copy(m->stager, m->stage[b], m->pieces, np, m->copy, err) < 0)
        goto fail;
    host_ns = guild_now_ns() - host_ns;
    if (cuda_check(cudaEventRecord(m->copied[b], m->copy), "stage event", err) < 0 ||
        (timed && cuda_check(cudaEventRecord(m->copy_t[1], m->copy), "timing event", err) < 0))
        goto fail;
    if (timed) {
        m->copy_timed = true;
        m->copy_bytes = bytes;
        m->copy_host_ns = host_ns;
    }
    m->streamed_bytes += bytes;
    return 0;
fail:
    m->stage_layer[b] = -1; /* its contents are unknown now */
    return -1;
}

/* A timing pair a -> b (recorded in that order on one stream): 1 with its device time in *ns once b has
 * completed, 0 while it has not (never waits), -1 when the time is lost to an error (cleared when not sticky,
 * as cuda_util does: a sticky one is reported by the next checked call). */
static int timing_read(cudaEvent_t a, cudaEvent_t b, double *ns)
{
    cudaError_t e = cudaEventQuery(b);
    if (e == cudaErrorNotReady)
        return 0;
    float ms = 0;
    if (e == cudaSuccess)
        e = cudaEventElapsedTime(&ms, a, b);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    *ns = (double)ms * 1e6;
    return 1;
}

/* Folds the last planned batch's timings into the device's costs. Called before each plan, after the ids' sync
 * (the previous batch's products, and the copies they waited for, are done by then: the reads find them
 * complete), and at each step's start (the previous step ended with the stream idle). */
static void cost_fold(moe_gpu_t *m)
{
    double ns = 0;
    int rc;
    if (m->run_timed && (rc = timing_read(m->run_t[0], m->run_t[1], &ns)) != 0) {
        m->run_timed = false;
        if (rc > 0 && expert_cost_add(&m->gpu_cost, (double)m->run_pairs, ns) && !m->gpu_cost_logged) {
            m->gpu_cost_logged = true;
            guild_log(GUILD_LOG_INFO, "cuda moe: device experts %.2f us per (token, expert) pair (measured: %lld "
                      "pairs in %.2f ms); the split plans with it", expert_cost_ns_per_unit(&m->gpu_cost) / 1e3,
                      (long long)m->run_pairs, ns / 1e6);
        }
    }
    if (m->copy_timed && (rc = timing_read(m->copy_t[0], m->copy_t[1], &ns)) != 0) {
        m->copy_timed = false;
        /* End to end, as the plan counts it (the copies, then the products). The ring path blocks the host in
         * cuda_stage_copy while the stager fills slots, and the copy stream idles between its copies meanwhile:
         * when the stream reached copy_t[0] at once (the buffer's last reader long done: the usual case), the
         * device time spans the fills and the last copies; when copy_t[0] waited behind that reader, the fills
         * made meanwhile are missing from it and the host's time in the call bounds them from below. The
         * pageable path's host time holds its copies (the host waits for each). Hence the larger of the two. */
        const double e2e = ns > (double)m->copy_host_ns ? ns : (double)m->copy_host_ns;
        if (rc > 0 && expert_cost_add(&m->copy_cost, (double)m->copy_bytes, e2e) && !m->copy_cost_logged) {
            m->copy_cost_logged = true;
            guild_log(GUILD_LOG_INFO, "cuda moe: staged expert copies %.1f GB/s end to end (measured: %.1f MiB in "
                      "%.2f ms, the host %.2f ms of it; the probe's %.1f GB/s until now); the split plans with it",
                      1.0 / expert_cost_ns_per_unit(&m->copy_cost), (double)m->copy_bytes / (1 << 20), e2e / 1e6,
                      (double)m->copy_host_ns / 1e6, m->pcie_bpns);
        }
    }
}

/* Whether this batch of a non-resident layer is planned (split or not) rather than sent whole to the CPU side:
 * streaming set up, the CPU side measured (or a forced split), and the host free to choose (a graph must not
 * hold the host-side choice). */
static bool want_split(const moe_gpu_t *m, const gpu_layer_t *L, cudaStream_t s)
{
    if (!m->stream || !L->h_gate || m->pcie_bpns <= 0 || (!m->have_b && m->force_split < 0))
        return false;
    enum cudaStreamCaptureStatus cs;
    if (cudaStreamIsCapturing(s, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
        (void)cudaGetLastError();
        return false;
    }
    return true;
}

/* Folds the CPU side's counters of the last step into the cost model: t = a + b * pairs, a from one-token
 * exchanges, b from larger ones. Only steps whose delegated exchanges went whole: a split one's wait (the
 * device-driven exchange's is device time after the device's own products) is not the CPU side's time. */
static void cost_update(moe_gpu_t *m)
{
    if (!m->stream || !m->fallback)
        return;
    moe_exec_stats_t now;
    moe_exec_stats(m->fallback, &now);
    const uint64_t dx = now.exchanges - m->fb_last.exchanges, dw = now.wait_ns - m->fb_last.wait_ns;
    if (dx && m->fb_pairs > 0 && !m->fb_split) {
        const double per = (double)dw / (double)dx;
        if (m->fb_pairs <= m->n_used) {
            m->cpu_a = m->have_a ? 0.8 * m->cpu_a + 0.2 * per : per;
            m->have_a = true;
        } else {
            const double b = (per - (m->have_a ? m->cpu_a : 0.0)) / (double)m->fb_pairs;
            if (b > 0) {
                const bool first = !m->have_b;
                m->cpu_b = m->have_b ? 0.5 * m->cpu_b + 0.5 * b : b;
                m->have_b = true;
                if (first)
                    guild_log(GUILD_LOG_INFO, "cuda moe: CPU experts %.1f us per (token, expert) pair (+ %.1f us "
                              "per exchange); a whole layer streams in %.2f ms at %.1f GB/s: large batches split "
                              "their experts between the CPU side and the device", m->cpu_b / 1e3, m->cpu_a / 1e3,
                              (double)m->stage_bytes / m->pcie_bpns / 1e6, m->pcie_bpns);
            }
        }
    }
    m->fb_last = now;
    m->fb_pairs = 0;
    m->fb_split = false;
}

/* The products of one layer's experts whose weights are at gate/up/down (device). */
static int run_experts(moe_gpu_t *m, const gpu_layer_t *L, const char *gate, const char *up, const char *down,
                       int32_t n, const float *x, const int32_t *ids, cudaStream_t s, guild_err_t *err)
{
    const int32_t pairs = n * m->n_used;
    int32_t tile = n <= FEW_TOKENS ? 1 : 8;
    if (pairs >= MMA_PAIRS_PER_EXPERT * m->n_expert && cuda_expert_mma_supported(L->gate_type) &&
        cuda_expert_mma_supported(L->down_type))
        tile = CUDA_EXPERT_MMA_TILE;
    const int32_t mt = cuda_expert_max_tiles(pairs, m->n_expert, tile);
    const guild_type_t at = quant_type_info(L->gate_type)->dot_type, ht = quant_type_info(L->down_type)->dot_type;
    if (L->oai) /* gate and up apart, then their biases and swiglu_oai; the down bias after the down products */
        return cuda_quantize(at, x, m->n_embd, m->act_x, m->ax_row, m->n_embd, n, s, err) < 0 ||
                       cuda_expert_route(ids, pairs, m->n_expert, tile, m->order, m->tiles, m->n_tiles, s, err) < 0 ||
                       cuda_expert_matmul(L->gate_type, m->n_embd, m->n_ff, gate, NULL, L->gate_mat, L->gate_row,
                                          m->act_x, m->ax_row, m->n_used, m->order, m->tiles, m->n_tiles, mt, tile,
                                          m->h, m->n_ff, s, err) < 0 ||
                       cuda_expert_matmul(L->gate_type, m->n_embd, m->n_ff, up, NULL, L->gate_mat, L->gate_row,
                                          m->act_x, m->ax_row, m->n_used, m->order, m->tiles, m->n_tiles, mt, tile,
                                          m->u, m->n_ff, s, err) < 0 ||
                       cuda_expert_swiglu_oai(m->h, m->u, ids, pairs, m->n_ff, L->gate_b, L->up_b, L->alpha,
                                              L->limit, s, err) < 0 ||
                       cuda_quantize(ht, m->h, m->n_ff, m->act_h, m->ah_row, m->n_ff, pairs, s, err) < 0 ||
                       cuda_expert_matmul(L->down_type, m->n_ff, m->n_embd, down, NULL, L->down_mat, L->down_row,
                                          m->act_h, m->ah_row, 1, m->order, m->tiles, m->n_tiles, mt, tile, m->y,
                                          m->n_embd, s, err) < 0 ||
                       cuda_expert_add_bias(m->y, ids, pairs, m->n_embd, L->down_b, s, err) < 0
                   ? -1
                   : 0;
    if (cuda_quantize(at, x, m->n_embd, m->act_x, m->ax_row, m->n_embd, n, s, err) < 0 ||
        cuda_expert_route(ids, pairs, m->n_expert, tile, m->order, m->tiles, m->n_tiles, s, err) < 0 ||
        cuda_expert_matmul(L->gate_type, m->n_embd, m->n_ff, gate, up, L->gate_mat, L->gate_row, m->act_x, m->ax_row,
                           m->n_used, m->order, m->tiles, m->n_tiles, mt, tile, m->h, m->n_ff, s, err) < 0 ||
        cuda_quantize(ht, m->h, m->n_ff, m->act_h, m->ah_row, m->n_ff, pairs, s, err) < 0 ||
        cuda_expert_matmul(L->down_type, m->n_ff, m->n_embd, down, NULL, L->down_mat, L->down_row, m->act_h,
                           m->ah_row, 1, m->order, m->tiles, m->n_tiles, mt, tile, m->y, m->n_embd, s, err) < 0)
        return -1;
    return 0;
}

/* The device part of a planned batch: its experts staged, their products on the stream with ids (the
 * device's pairs: `pairs` of them; the others skipped), y rows of those pairs written. The copies and the
 * products are timed (unless a timing is still unread). */
static int run_streamed(moe_gpu_t *m, int32_t layer, int32_t n, const float *x, const int32_t *ids,
                        const uint8_t *want, int64_t pairs, cudaStream_t s, guild_err_t *err)
{
    const gpu_layer_t *L = &m->layers[layer];
    const bool timed = !m->run_timed;
    int b;
    const uint64_t t0 = guild_now_ns();
    if (stage_load(m, layer, -1, want, true, &b, err) < 0)
        return -1;
    if (m->tl_on)
        m->tl_host_stage += (double)(guild_now_ns() - t0) / 1e6;
    if (cuda_check(cudaStreamWaitEvent(s, m->copied[b], 0), "wait for the staged experts", err) < 0 ||
        (m->tl_on && cuda_check(cudaEventRecord(m->tl[2], s), "timeline event", err) < 0) ||
        (timed && cuda_check(cudaEventRecord(m->run_t[0], s), "timing event", err) < 0))
        return -1;
    const size_t gr = (L->gate_mat * (size_t)m->n_expert + ALIGN - 1) / ALIGN * ALIGN;
    const char *st = m->stage[b];
    if (run_experts(m, L, st, st + gr, st + 2 * gr, n, x, ids, s, err) < 0 ||
        (m->tl_on && cuda_check(cudaEventRecord(m->tl[3], s), "timeline event", err) < 0) ||
        cuda_check(cudaEventRecord(m->consumed[b], s), "stage event", err) < 0 ||
        (timed && cuda_check(cudaEventRecord(m->run_t[1], s), "timing event", err) < 0))
        return guild_err_prefix(err, "streamed experts: ");
    if (timed) {
        m->run_timed = true;
        m->run_pairs = pairs;
    }
    m->streamed++;
    m->last_streamed = layer;
    return 0;
}

/* Folds the last split batch's timeline into the sums once the next batch's ids are on the host (every event
 * of that batch precedes them on the stream); tl_next becomes this batch's tl[0]. */
static void timeline_read(moe_gpu_t *m)
{
    if (m->tl_pending) {
        double ms[TL_N];
        bool ok = true;
        for (int i = 1; i < TL_N && ok; i++) {
            float f = 0;
            ok = cudaEventElapsedTime(&f, m->tl[i - 1], m->tl[i]) == cudaSuccess;
            ms[i] = f;
        }
        float g = 0;
        ok = ok && cudaEventElapsedTime(&g, m->tl[TL_N - 1], m->tl_next) == cudaSuccess;
        ms[0] = g;
        if (ok) {
            for (int i = 0; i < TL_N; i++)
                m->tl_sum[i] += ms[i];
            m->tl_count++;
        } else {
            (void)cudaGetLastError();
        }
        m->tl_pending = false;
    }
    cudaEvent_t t = m->tl[0];
    m->tl[0] = m->tl_next;
    m->tl_next = t;
}

/* Whether a planned batch of `pairs` pairs should have its layer's experts copied in full before its routing is
 * known, while the device still computes the layer's attention: when the whole layer copies in less than half
 * the time the CPU side would take for all the pairs, most of it goes to the device anyway, and copies made
 * during the dense part cost nothing; the plan then counts the staged experts as free. Not with a forced split
 * (tests): its expert choice must not depend on timings. */
static bool prefetch_pays(const moe_gpu_t *m, const gpu_layer_t *L, int64_t pairs)
{
    if (!m->have_b || m->force_split >= 0)
        return false;
    const double copy_bpns = expert_cost_known(&m->copy_cost) ? 1.0 / expert_cost_ns_per_unit(&m->copy_cost)
                                                               : m->pcie_bpns;
    const double cpu_ns = (m->have_a ? m->cpu_a : 0.0) + m->cpu_b * (double)pairs;
    return copy_bpns > 0 && (double)L->bytes / copy_bpns < 0.5 * cpu_ns;
}

/* A batch of a streamable layer, planned: the ids to the host, the split, the CPU side's exchange (its pairs
 * only) submitted first, then the device's copies and products. */
static int split_submit(moe_gpu_t *m, int32_t layer, int32_t n, const float *x, const int32_t *ids,
                        cudaStream_t s, guild_err_t *err)
{
    const gpu_layer_t *L = &m->layers[layer];
    const int32_t P = n * m->n_used, E = m->n_expert;
    int32_t *h_all = m->h_ids, *h_cpu = m->h_ids + (size_t)m->max_tokens * m->n_used,
            *h_gpu = m->h_ids + 2 * (size_t)m->max_tokens * m->n_used;
    int32_t *d_cpu = m->d_ids, *d_gpu = m->d_ids + (size_t)m->max_tokens * m->n_used;
    /* before waiting for the routing: the whole layer's copies, overlapping the dense part still on the stream
     * (the host may block meanwhile in a ring's fills; the device is busy) */
    if (prefetch_pays(m, L, P)) {
        const uint64_t before = m->streamed_bytes;
        int pb;
        if (stage_load(m, layer, m->last_streamed, NULL, false, &pb, err) < 0)
            return -1;
        m->prefetched += m->streamed_bytes > before; /* not when an earlier batch's copy had staged it all */
    }
    /* the router's output (and the last batch's id copies from h_cpu/h_gpu) complete here; waited for through
     * the fallback's sync, which keeps waking CPU workers asleep on an earlier exchange of the step (the arena's
     * device waits would otherwise spin on them while the host waits here) */
    if (cuda_check(cudaMemcpyAsync(h_all, ids, (size_t)P * sizeof *ids, cudaMemcpyDeviceToHost, s), "copy expert ids",
                   err) < 0 ||
        cuda_check(cudaEventRecord(m->ids_ready, s), "record expert ids", err) < 0 ||
        cuda_check(cudaEventRecord(m->tl_next, s), "timeline event", err) < 0 ||
        cuda_moe_sync(m->fallback, m->ids_ready, err) < 0)
        return -1;
    const uint64_t t_ids = guild_now_ns();
    timeline_read(m);
    cost_fold(m);
    memset(m->count, 0, (size_t)E * sizeof *m->count);
    for (int32_t p = 0; p < P; p++) {
        if (h_all[p] < 0 || h_all[p] >= E)
            return guild_err_set(err, "cuda moe: pair %d: expert id %d of %d", p, h_all[p], E);
        m->count[h_all[p]]++;
    }
    int sb = -1; /* experts already staged (or on their way) cost no copy */
    for (int i = 0; i < 2; i++)
        if (m->stage_layer[i] == layer)
            sb = i;
    const uint64_t eb = 2 * (uint64_t)L->gate_mat + L->down_mat;
    for (int32_t e = 0; e < E; e++)
        m->ebytes[e] = sb >= 0 && m->staged[sb][e] ? 0 : eb;
    /* the measured costs once known; until then the probe's copy rate and free products, as before */
    const double copy_bpns = expert_cost_known(&m->copy_cost) ? 1.0 / expert_cost_ns_per_unit(&m->copy_cost)
                                                               : m->pcie_bpns;
    const expert_split_model_t em = {.copy_bpns = copy_bpns,
                                     .gpu_ns_per_pair = expert_cost_ns_per_unit(&m->gpu_cost),
                                     .cpu_a_ns = m->have_a ? m->cpu_a : 0.0, .cpu_b_ns = m->cpu_b,
                                     .force_gpu_fraction = m->force_split};
    expert_split_result_t r;
    expert_split_plan(m->split, m->count, m->ebytes, &em, m->on_gpu, &r);
    m->split_gpu_experts += (uint64_t)r.gpu_experts;
    m->split_cpu_experts += (uint64_t)r.cpu_experts;
    m->split_gpu_pairs += (uint64_t)r.gpu_pairs;
    m->split_cpu_pairs += (uint64_t)r.cpu_pairs;
    m->n_pairs = P;
    if (r.gpu_pairs == 0) { /* all on the CPU side: no copy */
        m->on_device = false;
        m->fb_pairs = P;
        return m->fallback->ops->submit(m->fallback, layer, n, x, ids, s, err);
    }
    m->on_device = true;
    if (r.cpu_pairs == 0) { /* all on the device: no exchange; the next streamed layer's copy behind this one */
        if (run_streamed(m, layer, n, x, ids, m->on_gpu, r.gpu_pairs, s, err) < 0)
            return -1;
        for (int32_t l2 = layer + 1; l2 < m->n_layer; l2++)
            if (!m->layers[l2].gate && m->layers[l2].h_gate) {
                int b2;
                if (stage_load(m, l2, layer, NULL, false, &b2, err) < 0)
                    return guild_err_prefix(err, "layer %d: ", l2);
                break;
            }
        return 0;
    }
    for (int32_t p = 0; p < P; p++) {
        const bool g = m->on_gpu[h_all[p]];
        h_cpu[p] = g ? -1 : h_all[p];
        h_gpu[p] = g ? h_all[p] : -1;
    }
    m->split_cpu = true;
    m->fb_split = true;
    if (cuda_check(cudaMemcpyAsync(d_cpu, h_cpu, (size_t)P * sizeof *ids, cudaMemcpyHostToDevice, s),
                   "copy expert ids", err) < 0 ||
        cuda_check(cudaMemcpyAsync(d_gpu, h_gpu, (size_t)P * sizeof *ids, cudaMemcpyHostToDevice, s),
                   "copy expert ids", err) < 0 ||
        m->fallback->ops->submit(m->fallback, layer, n, x, d_cpu, s, err) < 0 ||
        cuda_check(cudaEventRecord(m->tl[1], s), "timeline event", err) < 0)
        return -1;
    /* The exchange is posted by the device in microseconds (the stream idles since the ids), but CPU workers asleep
     * on the step doorbell wake only through a host sync, and the host is about to spend the copies' time in
     * stage_load: without this wait they would sleep through the batch (until their wait slice ends). */
    if (cuda_moe_sync(m->fallback, m->tl[1], err) < 0)
        return -1;
    m->tl_host_plan += (double)(guild_now_ns() - t_ids) / 1e6;
    m->tl_on = true;
    const int rc = run_streamed(m, layer, n, x, d_gpu, m->on_gpu, r.gpu_pairs, s, err);
    m->tl_on = false;
    return rc;
}

static int gpu_submit(moe_exec_t *base, int32_t layer, int32_t n, const float *x, const int32_t *ids,
                      void *queue, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    cudaStream_t s = queue;
    if (layer < 0 || layer >= m->n_layer)
        return guild_err_set(err, "cuda moe: layer %d of %d", layer, m->n_layer);
    if (n < 1 || n > m->max_tokens)
        return guild_err_set(err, "cuda moe: %d tokens in an exchange (1..%d)", n, m->max_tokens);
    const gpu_layer_t *L = &m->layers[layer];
    m->on_device = L->gate != NULL;
    m->split_cpu = false;
    if (m->on_device) {
        if (run_experts(m, L, L->gate, L->up, L->down, n, x, ids, s, err) < 0)
            return guild_err_prefix(err, "layer %d: device experts: ", layer);
        return 0;
    }
    if (!want_split(m, L, s)) {
        m->fb_pairs = n * m->n_used;
        return m->fallback->ops->submit(m->fallback, layer, n, x, ids, s, err);
    }
    if (split_submit(m, layer, n, x, ids, s, err) < 0)
        return guild_err_prefix(err, "layer %d: ", layer);
    return 0;
}

static int gpu_collect(moe_exec_t *base, const float **y, void *queue, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    cudaStream_t s = queue;
    if (!m->on_device)
        return m->fallback->ops->collect(m->fallback, y, s, err);
    if (m->split_cpu) {
        const float *yc = NULL;
        if (m->fallback->ops->collect(m->fallback, &yc, s, err) < 0 ||
            cuda_check(cudaEventRecord(m->tl[4], s), "timeline event", err) < 0 ||
            cuda_expert_merge(m->y, yc, m->d_ids, m->n_pairs, m->n_embd, s, err) < 0 ||
            cuda_check(cudaEventRecord(m->tl[5], s), "timeline event", err) < 0)
            return -1;
        m->tl_pending = true;
    }
    *y = m->y;
    return 0;
}

static bool gpu_capturable(const moe_exec_t *base)
{
    const moe_gpu_t *m = (const moe_gpu_t *)base;
    return !m->fallback || cuda_moe_capturable(m->fallback);
}

static int gpu_step_begin(moe_exec_t *base, void *queue, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    cudaStream_t s = queue;
    cost_update(m);
    if (m->stream)
        cost_fold(m);
    return m->fallback ? cuda_moe_step_begin(m->fallback, s, err) : 0;
}

static int gpu_step_end(moe_exec_t *base, void *queue, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    cudaStream_t s = queue;
    return m->fallback ? cuda_moe_step_end(m->fallback, s, err) : 0;
}

static int gpu_sync(moe_exec_t *base, void *done_event, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    cudaEvent_t done = done_event;
    if (m->fallback)
        return cuda_moe_sync(m->fallback, done, err);
    return cuda_check(cudaEventSynchronize(done), "forward pass", err);
}

static int gpu_result(moe_exec_t *base, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    return m->fallback ? cuda_moe_result(m->fallback, err) : 0;
}

static void gpu_stats(const moe_exec_t *base, moe_exec_stats_t *out)
{
    const moe_gpu_t *m = (const moe_gpu_t *)base;
    out->streamed = m->streamed;
    out->streamed_bytes = m->streamed_bytes;
    out->split_gpu_experts = m->split_gpu_experts;
    out->split_cpu_experts = m->split_cpu_experts;
    out->split_gpu_pairs = m->split_gpu_pairs;
    out->split_cpu_pairs = m->split_cpu_pairs;
}


static void gpu_destroy(moe_exec_t *base)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    if (m->copy)
        cudaStreamSynchronize(m->copy);
    if (m->tl_count > 0) {
        const double c = (double)m->tl_count;
        guild_log(GUILD_LOG_INFO, "cuda moe: split batches' time, mean of %lld (ms): before the ids (dense) %.2f, "
                  "exchange posted %.2f, waiting for copies %.2f, device products %.2f, then waiting for the CPU "
                  "side %.2f, merge %.2f; host: plan %.2f, in the copies %.2f; %llu batches' layers copied "
                  "before their routing", (long long)m->tl_count, m->tl_sum[0] / c, m->tl_sum[1] / c,
                  m->tl_sum[2] / c, m->tl_sum[3] / c, m->tl_sum[4] / c, m->tl_sum[5] / c, m->tl_host_plan / c,
                  m->tl_host_stage / c, (unsigned long long)m->prefetched);
    }
    for (int i = 0; i < TL_N; i++)
        if (m->tl[i])
            cudaEventDestroy(m->tl[i]);
    if (m->tl_next)
        cudaEventDestroy(m->tl_next);
    for (int b = 0; b < 2; b++) {
        if (m->copied[b])
            cudaEventDestroy(m->copied[b]);
        if (m->consumed[b])
            cudaEventDestroy(m->consumed[b]);
    }
    if (m->ids_ready)
        cudaEventDestroy(m->ids_ready);
    for (int i = 0; i < 2; i++) {
        if (m->run_t[i])
            cudaEventDestroy(m->run_t[i]);
        if (m->copy_t[i])
            cudaEventDestroy(m->copy_t[i]);
    }
    if (m->copy)
        cudaStreamDestroy(m->copy);
    void **bufs[] = {&m->mem, &m->act_x, (void **)&m->h, &m->act_h, (void **)&m->order, (void **)&m->tiles,
                     (void **)&m->n_tiles, (void **)&m->y, (void **)&m->stage[0], (void **)&m->d_ids,
                     (void **)&m->u, &m->bias_mem};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        cuda_free(bufs[i]);
    if (m->h_ids)
        cudaFreeHost(m->h_ids);
    expert_split_destroy(&m->split);
    cuda_stage_destroy(&m->own_stager);
    free(m->staged[0]);
    free(m->count);
    free(m->ebytes);
    free(m->on_gpu);
    free(m->pieces);
    free(m->layers);
    free(m);
}

static const moe_exec_ops_t gpu_ops = {
    .name = "gpu",
    .mem = MOE_EXEC_DEVICE,
    .submit = gpu_submit,
    .collect = gpu_collect,
    .destroy = gpu_destroy,
    .stats = gpu_stats,
    .capturable = gpu_capturable,
    .step_begin = gpu_step_begin,
    .step_end = gpu_step_end,
    .sync = gpu_sync,
    .result = gpu_result,
};

void cuda_moe_gpu_force_split(moe_exec_t *base, double gpu_fraction)
{
    GUILD_ASSERT(base->ops == &gpu_ops);
    ((moe_gpu_t *)base)->force_split = gpu_fraction < 0 ? -1.0 : gpu_fraction;
}

void cuda_moe_gpu_set_stage(moe_exec_t *base, cuda_stage_t *stage)
{
    GUILD_ASSERT(base->ops == &gpu_ops && stage);
    ((moe_gpu_t *)base)->stager = stage;
}

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* Row bytes of n elements in the dot type of `type` weights, rounded to 16; 0 when n is not whole blocks. */
static size_t dot_row(guild_type_t type, int64_t n)
{
    uint64_t b = 0;
    if (quant_row_bytes(quant_type_info(type)->dot_type, (uint64_t)n, &b, NULL) < 0)
        return 0;
    return round_up((size_t)b, 16);
}

/* Sets up the staging buffers and times one layer's copy. The copies read the model's mapping as it is
 * (pageable: the driver stages them through its pinned buffers, and the host thread waits for each): registering
 * a file mapping of many GiB for DMA took minutes on the device machine (a gpu-worker not ready after 120 s with
 * a 2.7 GiB range), where the arena's 0.3 GiB of shared memory registers in milliseconds. */
static int stream_setup(moe_gpu_t *m, size_t largest, guild_err_t *err)
{
    int32_t probe = -1;
    for (int32_t il = 0; il < m->n_layer; il++) {
        const gpu_layer_t *L = &m->layers[il];
        if (L->gate || !L->h_gate)
            continue;
        if (probe < 0 || L->bytes > m->layers[probe].bytes)
            probe = il;
    }
    if (probe < 0)
        return 0; /* nothing to stream */
    size_t counted = 0;
    if (cuda_alloc((void **)&m->stage[0], 2 * largest, &counted, "the expert staging buffers", err) < 0 ||
        cuda_check(cudaStreamCreateWithFlags(&m->copy, cudaStreamNonBlocking), "create the copy stream", err) < 0)
        return -1;
    if (!m->stager) {
        if (cuda_stage_new_pageable(&m->own_stager, err) < 0)
            return -1;
        m->stager = m->own_stager;
    }
    m->stage[1] = m->stage[0] + largest;
    m->stage_bytes = largest;
    m->stage_layer[0] = m->stage_layer[1] = -1;
    /* the split's host side: the plan's scratch, the ids to the host and back */
    const size_t E = (size_t)m->n_expert, P = (size_t)m->max_tokens * (size_t)m->n_used;
    if (!(m->staged[0] = calloc(2 * E, 1)) || !(m->count = calloc(E, sizeof *m->count)) ||
        !(m->ebytes = calloc(E, sizeof *m->ebytes)) || !(m->on_gpu = calloc(E, 1)) ||
        !(m->pieces = calloc(3 * E, sizeof *m->pieces)))
        return guild_err_set(err, "cuda moe: out of memory");
    m->staged[1] = m->staged[0] + E;
    if (cuda_check(cudaEventCreateWithFlags(&m->ids_ready, cudaEventDisableTiming), "create event", err) < 0 ||
        expert_split_new(&m->split, m->n_expert, err) < 0 ||
        cuda_alloc((void **)&m->d_ids, 2 * P * sizeof(int32_t), &counted, "expert routing", err) < 0)
        return -1;
    if (cudaMallocHost((void **)&m->h_ids, 3 * P * sizeof(int32_t)) != cudaSuccess) {
        m->h_ids = NULL;
        (void)cudaGetLastError();
        return guild_err_set(err, "cuda moe: cannot allocate %.1f KiB of pinned host memory for expert ids",
                             (double)(3 * P * sizeof(int32_t)) / 1024);
    }
    for (int b = 0; b < 2; b++)
        if (cuda_check(cudaEventCreateWithFlags(&m->copied[b], cudaEventDisableTiming), "create event", err) < 0 ||
            cuda_check(cudaEventCreateWithFlags(&m->consumed[b], cudaEventDisableTiming), "create event", err) < 0 ||
            cuda_check(cudaEventCreate(&m->run_t[b]), "create event", err) < 0 ||
            cuda_check(cudaEventCreate(&m->copy_t[b]), "create event", err) < 0)
            return -1;
    for (int i = 0; i <= TL_N; i++)
        if (cuda_check(cudaEventCreate(i < TL_N ? &m->tl[i] : &m->tl_next), "create event", err) < 0)
            return -1;
    /* plausible ranges: 0.01 ns .. 0.1 s a pair; 1000 .. 0.01 GB/s */
    expert_cost_init(&m->gpu_cost, 0.01, 1e8);
    expert_cost_init(&m->copy_cost, 1e-3, 100);
    /* the copy bandwidth: the largest layer, twice (the first pays for first touches) */
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = 0;
    int rc = -1;
    if (cuda_check(cudaEventCreate(&e0), "create event", err) < 0 || cuda_check(cudaEventCreate(&e1), "create event", err) < 0)
        goto out;
    for (int rep = 0; rep < 2; rep++) {
        int b;
        m->stage_layer[0] = m->stage_layer[1] = -1;
        const uint64_t t0 = guild_now_ns();
        if (cuda_check(cudaEventRecord(e0, m->copy), "probe event", err) < 0 ||
            stage_load(m, probe, -1, NULL, false, &b, err) < 0 ||
            cuda_check(cudaEventRecord(e1, m->copy), "probe event", err) < 0 ||
            cuda_check(cudaEventSynchronize(e1), "probe copy", err) < 0 ||
            cuda_check(cudaEventElapsedTime(&ms, e0, e1), "probe event", err) < 0)
            goto out;
        const float wall = (float)((double)(guild_now_ns() - t0) / 1e6); /* the host's staging counts too */
        ms = wall > ms ? wall : ms;
    }
    m->stage_layer[0] = m->stage_layer[1] = -1;
    m->streamed_bytes = 0;
    m->pcie_bpns = ms > 0 ? (double)m->layers[probe].bytes / ((double)ms * 1e6) : 0;
    m->stream = true;
    guild_log(GUILD_LOG_INFO, "cuda moe: streaming the other layers' experts for large batches: %.1f MiB a layer "
              "in %.2f ms (%.1f GB/s)", (double)m->layers[probe].bytes / (1 << 20), (double)ms, m->pcie_bpns);
    rc = 0;
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    return rc;
}

int cuda_moe_gpu_new(moe_exec_t **out, const cuda_moe_gpu_layer_t *layers, int32_t n_layer, int32_t n_expert,
                     int32_t max_tokens, int32_t n_embd, int32_t n_ff, int32_t n_used, bool stream,
                     cuda_stage_t *stage, moe_exec_t *fallback, size_t *bytes, guild_err_t *err)
{
    *out = NULL;
    moe_gpu_t *m = calloc(1, sizeof *m);
    if (!m)
        return guild_err_set(err, "cuda moe: out of memory");
    m->base.ops = &gpu_ops;
    m->fallback = fallback;
    m->n_layer = n_layer;
    m->n_expert = n_expert;
    m->max_tokens = max_tokens;
    m->n_embd = n_embd;
    m->n_ff = n_ff;
    m->n_used = n_used;
    m->force_split = -1.0;
    m->last_streamed = -1;
    m->stager = stage;
    if (!(m->layers = calloc((size_t)n_layer, sizeof *m->layers))) {
        guild_err_set(err, "cuda moe: out of memory");
        goto fail;
    }
    size_t total = 0, largest = 0, bias_total = 0;
    int32_t resident = 0, streamable = 0;
    for (int32_t il = 0; il < n_layer; il++) {
        const cuda_moe_gpu_layer_t *L = &layers[il];
        gpu_layer_t *D = &m->layers[il];
        if (!L->gate || (!L->resident && !stream))
            continue;
        const size_t ax = dot_row(L->gate_type, n_embd), ah = dot_row(L->down_type, n_ff);
        if (!cuda_type_supported(L->gate_type) || !cuda_type_supported(L->down_type) || !ax || !ah) {
            guild_err_set(err, "cuda moe: layer %d: experts of types %s/%s (width %d, %d) are not supported on the "
                          "device (supported: %s)", il, quant_type_info(L->gate_type)->name,
                          quant_type_info(L->down_type)->name, n_embd, n_ff, cuda_supported_types());
            goto fail;
        }
        m->ax_row = ax > m->ax_row ? ax : m->ax_row;
        m->ah_row = ah > m->ah_row ? ah : m->ah_row;
        D->h_gate = L->gate;
        D->h_up = L->up;
        D->h_down = L->down;
        D->gate_type = L->gate_type;
        D->down_type = L->down_type;
        D->gate_row = L->gate_row;
        D->gate_mat = L->gate_mat;
        D->down_row = L->down_row;
        D->down_mat = L->down_mat;
        D->bytes = 2 * round_up(L->gate_mat * (size_t)n_expert, ALIGN) + round_up(L->down_mat * (size_t)n_expert, ALIGN);
        if (L->oai) {
            D->oai = true;
            D->alpha = L->alpha;
            D->limit = L->limit;
            bias_total += round_up((size_t)n_expert * (size_t)(2 * n_ff + n_embd) * sizeof(float), ALIGN);
        }
        if (L->resident) {
            total += D->bytes;
            resident++;
        } else {
            largest = D->bytes > largest ? D->bytes : largest;
            streamable++;
        }
    }
    if (fallback && fallback->ops->mem != MOE_EXEC_DEVICE) {
        guild_err_set(err, "cuda moe: the executor for the other layers (\"%s\") works on host memory",
                      fallback->ops->name);
        goto fail;
    }
    if (resident < n_layer && !fallback) {
        guild_err_set(err, "cuda moe: %d of %d layers' experts are not on the device and there is no other executor",
                      n_layer - resident, n_layer);
        goto fail;
    }
    size_t counted = 0;
    const size_t T = (size_t)max_tokens, P = T * (size_t)n_used;
    const int32_t mt = cuda_expert_max_tiles((int32_t)P, n_expert, 1);
    if (cuda_alloc(&m->mem, total, &counted, "the resident expert weights", err) < 0 ||
        cuda_alloc(&m->act_x, T * m->ax_row, &counted, "expert activations", err) < 0 ||
        cuda_alloc((void **)&m->h, P * (size_t)n_ff * sizeof(float), &counted, "expert activations", err) < 0 ||
        cuda_alloc(&m->act_h, P * m->ah_row, &counted, "expert activations", err) < 0 ||
        cuda_alloc((void **)&m->order, P * sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->tiles, (size_t)mt * 4 * sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->n_tiles, sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->y, P * (size_t)n_embd * sizeof(float), &counted, "routed expert outputs", err) < 0 ||
        (bias_total && (cuda_alloc(&m->bias_mem, bias_total, &counted, "the experts' biases", err) < 0 ||
                        cuda_alloc((void **)&m->u, P * (size_t)n_ff * sizeof(float), &counted, "expert activations",
                                   err) < 0)))
        goto fail;
    /* the oai layers' biases: on the device for resident and streamed layers alike (small beside the weights) */
    size_t boff = 0;
    for (int32_t il = 0; il < n_layer; il++) {
        const cuda_moe_gpu_layer_t *L = &layers[il];
        gpu_layer_t *D = &m->layers[il];
        if (!D->oai)
            continue;
        const size_t fb = (size_t)n_expert * (size_t)n_ff * sizeof(float), eb = (size_t)n_expert * (size_t)n_embd *
                                                                                  sizeof(float);
        float *base = (float *)((char *)m->bias_mem + boff);
        D->gate_b = base;
        D->up_b = base + (size_t)n_expert * (size_t)n_ff;
        D->down_b = base + 2 * (size_t)n_expert * (size_t)n_ff;
        boff += round_up(2 * fb + eb, ALIGN);
        if (cuda_check(cudaMemcpy((void *)D->gate_b, L->gate_b, fb, cudaMemcpyHostToDevice), "upload expert biases",
                       err) < 0 ||
            cuda_check(cudaMemcpy((void *)D->up_b, L->up_b, fb, cudaMemcpyHostToDevice), "upload expert biases",
                       err) < 0 ||
            cuda_check(cudaMemcpy((void *)D->down_b, L->down_b, eb, cudaMemcpyHostToDevice), "upload expert biases",
                       err) < 0)
            goto fail;
    }
    size_t off = 0;
    for (int32_t il = 0; il < n_layer; il++) {
        const cuda_moe_gpu_layer_t *L = &layers[il];
        gpu_layer_t *D = &m->layers[il];
        if (!D->h_gate || !L->resident)
            continue;
        const size_t gb = L->gate_mat * (size_t)n_expert, db = L->down_mat * (size_t)n_expert;
        char *base = (char *)m->mem + off;
        D->gate = base;
        D->up = base + round_up(gb, ALIGN);
        D->down = base + 2 * round_up(gb, ALIGN);
        off += D->bytes;
        if (cuda_check(cudaMemcpy((void *)D->gate, L->gate, gb, cudaMemcpyHostToDevice), "upload expert weights", err) < 0 ||
            cuda_check(cudaMemcpy((void *)D->up, L->up, gb, cudaMemcpyHostToDevice), "upload expert weights", err) < 0 ||
            cuda_check(cudaMemcpy((void *)D->down, L->down, db, cudaMemcpyHostToDevice), "upload expert weights", err) < 0)
            goto fail;
    }
    const size_t before = counted;
    if (streamable && stream_setup(m, largest, err) < 0)
        goto fail;
    counted += streamable ? 2 * largest + 2 * P * sizeof(int32_t) : 0; /* stream_setup's */
    if (bytes)
        *bytes += counted;
    guild_log(GUILD_LOG_INFO, "cuda moe: experts of %d of %d layers on the device (%.1f MiB, buffers %.1f MiB)%s",
              resident, n_layer, (double)total / (1 << 20), (double)(before - total) / (1 << 20),
              m->stream ? ", the others streamed for large batches" : "");
    *out = &m->base;
    return 0;
fail:
    gpu_destroy(&m->base);
    return -1;
}
