/* The "gpu" device executor: the routed experts resident in device memory run there, the others go through a
 * fallback executor (CPU workers or in-process) or, in forward passes large enough to pay for PCIe, are streamed
 * to the device through staging slots (cuda_expert_stream.h) and run there while the CPU side computes the
 * rest. See cuda_moe.h.
 *
 * A layer's experts are ranked for the pass: resident experts 0 .. n_res - 1 (in id order), then the streamed
 * ones, in id order; the CPU side's have no rank. The rank table travels with each kernel launch
 * (cuda_expert_ids_map), so nothing here waits for the routing on the host: a pass's copies, products and
 * exchanges are all enqueued ahead, and a decode step stays one CUDA graph. Each device part (the resident
 * experts, each staged chunk) maps the batch's ids to its local ids (other pairs skipped), groups its pairs by
 * expert and computes them:
 *   x quantized to the gate's dot type (once a layer); h[p] = silu(gate_e x_t) * up_e x_t for every pair p =
 *   (t, k) of the part in one kernel; h quantized to the down matrix's dot type; y[p] = down_e h[p].
 *   A step of a few tokens (tiles of one pair) skips the grouping: cuda_expert_pairs computes each pair in a row of
 *   blocks, which quantize its x (then its h) themselves: two launches (set_fuse; the same bits); from
 *   CUDA_EXPERT_PAIRS_MMA_MIN_TOK tokens on cuda_expert_pairs_mma, which groups each expert's pairs in its launch
 *   (the same bits again).
 *   gpt-oss's layers (oai) take the gate and up products apart, add the experts' biases and apply swiglu_oai
 *   (cuda_expert_swiglu_oai), and add the down bias to y (cuda_expert_add_bias); the biases are indexed by the
 *   experts' own ids (the part's pairs kept with them: cuda_expert_ids_keep).
 * y is [n][n_used][n_embd] in pair order: what collect returns, the CPU side's rows merged in. Every row comes
 * from one side, the bits that side gives for the pair alone (cuda_matmul's arithmetic here, so y differs from
 * the CPU workers' only through expf in SiLU). Which side computes which expert moves with the measured costs,
 * never a pair's bits.
 *
 * Costs: the copy rate from the chunks' copy events, the device's products per pair from each streamed layer's
 * events, the CPU side's a + b * pairs from whole exchanges (a: one-token ones) and from the split layers'
 * exchanges that the device waited for (their time from the exchange's post to its results). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/util/log.h"
#include "gpu-worker/dense/cuda/cuda_expert_stream.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_moe.h"
#include "gpu-worker/dense/cuda/cuda_stage.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/expert_cost.h"
#include "gpu-worker/dense/expert_split.h"
#include "ipc/exchange_layout.h" /* GUILD_EXCHANGE_HINT_MAX */

#define ALIGN 256u
#define FEW_TOKENS 4 /* up to this many tokens a pass: never streamed */
#define ONE_PAIR_TOKENS 16 /* up to this many tokens a step: one pair per tile (mmvq-style); more: tiles of 8 pairs.
                              A batched decode step of up to 16 sessions holds about 1-2 pairs per routed expert:
                              an 8-pair tile then runs its 8 slots' reductions for one or two pairs, and the
                              second pair of an expert re-reads its weights from L2 (the same bits either way) */
#define MMA_PAIRS_PER_EXPERT 4 /* from this many pairs per expert on average: the int8 tensor-core tiles */
#define PAIR_UNITS 16 /* expected pairs per expert are planned in sixteenths (expert_split takes integers) */
#define LAG 2
#define LAG_N 4
#define CPU_BUCKETS 6 /* batches of <= 64, 256, 1024, 4096, 16384 tokens, more */
#define CPU_MARGIN 1.2 /* the split plans with the CPU side's time per pair this much slower than measured: a late
                          CPU side stalls the device, an early one only leaves it a little more */

static int cpu_bucket(int32_t n)
{
    int b = 0;
    for (int32_t lim = 64; b < CPU_BUCKETS - 1 && n > lim; lim *= 4)
        b++;
    return b;
}
typedef struct gpu_layer {
    const char *gate, *up, *down; /* device: the resident experts, rank r's matrices at + r * gate_mat / down_mat */
    int32_t n_res;                /* resident experts (n_expert: the whole layer, ranks = ids) */
    bool computable;              /* the kernels take its types */
    guild_type_t gate_type, down_type;
    size_t gate_row, gate_mat, down_row, down_mat; /* the file's */
    cuda_rank_table_t base;       /* ranks of the resident experts, -1 elsewhere */
    cuda_rank_table_t pass;       /* this pass's: the resident ones, then the streamed ones */
    int32_t n_streamed;           /* experts streamed this pass */
    int32_t n_cpu;                /* experts this pass leaves to the CPU side */
    /* this pass's timing of the layer (a streamed pass): submitted (the dense part done), CPU part posted,
     * products started / done, collected */
    cudaEvent_t ev[5];
    bool timed, cpu_timed;
    double exp_gpu_pairs, exp_cpu_pairs; /* expected */
    bool oai;                     /* gpt-oss: biases and swiglu_oai (cuda_moe_gpu_layer_t) */
    float alpha, limit;
    const float *gate_b, *up_b, *down_b; /* device, in bias_mem (oai) */
} gpu_layer_t;

enum { EV_POSTED, EV_RUN0, EV_RUN1, EV_COLLECTED, EV_IN, N_EV };

typedef struct moe_gpu {
    moe_exec_t base;
    moe_exec_t *fallback;      /* borrowed; experts not resident */
    gpu_layer_t *layers;       /* [n_layer] */
    int32_t n_layer, n_expert, max_tokens, n_embd, n_ff, n_used;
    void *mem;                 /* the resident expert weights */
    void *act_x;               /* [max_tokens] rows of ax_row bytes: x in the gate's dot type */
    size_t ax_row;
    float *h;                  /* [max_tokens * n_used][n_ff] */
    float *u;                  /* [max_tokens * n_used][n_ff]: the up products of oai layers; NULL without */
    void *bias_mem;            /* the oai layers' expert biases */
    int32_t *d_gid;            /* [max_tokens * n_used]: a part's pairs with their experts' ids (oai layers) */
    void *act_h;               /* [max_tokens * n_used] rows of ah_row bytes: h in the down matrix's dot type */
    size_t ah_row;
    int32_t *order;            /* [max_tokens * n_used] */
    int32_t *tiles;            /* [tiles_rows][4], 16-byte aligned; a layer routed once: its tiles in the lower half,
                                  a part's in the upper half, the part's count in the last row */
    int32_t tiles_rows;
    bool layer_routed;         /* the layer in run_device was routed once over its device ranks (d_loc: each
                                  pair's rank): its parts take their tiles from that routing */
    int32_t *n_tiles;          /* device int */
    int32_t *d_loc, *d_cpu;    /* [max_tokens * n_used]: a part's local ids; the CPU side's ids */
    int32_t *d_hint;           /* [GUILD_EXCHANGE_HINT_MAX * n_used]: a prefetch hint's ids, the device's experts
                                  masked; NULL: the fallback takes no hints */
    float *y;                  /* [max_tokens][n_used][n_embd] */
    /* the exchange in flight */
    int32_t layer, n;
    bool dev, cpu;             /* computed (partly) here; has a CPU part to collect and merge */
    /* its device products not enqueued yet (a split layer of a pass that streams nothing): they follow the
     * prefetch hint (gpu_hint), or collect enqueues them when no hint came (run_pending) */
    bool pending;
    const float *pend_x;
    const int32_t *pend_ids;

    /* the pass (step_begin to step_end): planned at its first batch of more than FEW_TOKENS tokens */
    bool pass_open, pass_planned, pass_stream;
    int32_t last_layer;        /* submitted last in this pass (a lower one starts a new pass without step_begin) */
    cudaEvent_t pass_ev[2];    /* a streamed pass's start and end on the compute stream */
    /* a streamed pass runs the host at most LAG layers ahead of the device: it waits, through the fallback's sync
     * (which wakes CPU workers asleep on the exchange the device posted), for the collect LAG layers back, so
     * the device's queue never fills and blocks the host where it could not wake them */
    cudaEvent_t lag[LAG_N];
    int32_t n_collected;       /* layers collected in this pass */
    bool pass_timed;
    int32_t *ids_buf;          /* [n_expert] scratch */
    int32_t *count;            /* [n_expert] expected pairs (PAIR_UNITS) of the plan */
    uint64_t *ebytes;          /* [n_expert] */
    uint8_t *on_gpu;           /* [n_expert] */

    /* streaming */
    xs_t *xs;                  /* NULL: no streaming */
    expert_split_t *split;
    double force_split;        /* tests: < 0 none, else the device's fraction of the expected pairs */
    bool fuse;                 /* a whole resident layer's route quantizes its rows in its launch, a few tokens'
                                  products go without a route (fold_pairs) (set_fuse) */
    double pcie_bpns;          /* probed copy bandwidth, bytes per ns */
    expert_cost_t gpu_cost;    /* ns per device pair of a streamed layer's products */
    expert_cost_t copy_cost;   /* ns per byte of the chunks' copies (copy engine time) */
    expert_cost_t dense_cost;  /* ns per token of a layer's dense part (from one layer's collect to the next
                                  one's submit): the copy time it hides */
    expert_cost_t post_cost;   /* ns per token of posting a layer's exchange to the CPU side (on the compute
                                  stream: the device's share of a CPU part) */
    int32_t pass_n;            /* tokens of the pass */
    /* the CPU side's time per exchange, a + b * pairs ns; b per size of batch (cpu_bucket): a pair costs the
     * CPU less in a large batch, where each expert's weights serve more tokens */
    double cpu_a, cpu_b[CPU_BUCKETS];
    bool have_a, have_b[CPU_BUCKETS], cost_logged;
    moe_exec_stats_t fb_last;  /* the fallback's counters at the start of this step */
    int32_t fb_pairs;          /* pairs of an exchange delegated whole in this step (0: none) */
    bool fb_mixed;             /* an exchange of this step was split */
    expert_host_mats_t *own_src; /* [n_layer * n_expert]: the file's tensors as sources, for layers without copies */
    cuda_stage_t *own_stage;   /* pageable, when none was given */
    uint64_t streamed, split_gpu_experts, split_cpu_experts, split_gpu_pairs, split_cpu_pairs;
    uint64_t stream_passes, stream_span_ns, copy_wait_ns, cpu_wait_ns, copy_busy_ns;
} moe_gpu_t;

/* Where a streamed pass's device time went, summed over its timed layers (ns), for the log: the dense parts
 * between them, the exchanges posted, the device experts before the streamed ones (x quantized, the resident
 * part), the streamed products (with the waits for their copies), the collects (with the device's spin for the
 * CPU side). */
typedef struct pass_phases {
    double dense, post, pre, products, copy_wait, collect, cpu_spin;
    int32_t layers, split, cpu_only;
} pass_phases_t;

static int ev_create(cudaEvent_t *e, guild_err_t *err)
{
    return cuda_check(cudaEventCreate(e), "create event", err);
}

static double ev_ns(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return (double)ms * 1e6;
}

/* Folds the CPU side's counters of the last step into a (one-token exchanges) and b (larger ones), from steps
 * whose exchanges all went whole to it (a split one's wait is not the CPU side's time). */
static void cost_update(moe_gpu_t *m)
{
    if (!m->fallback)
        return;
    moe_exec_stats_t now;
    moe_exec_stats(m->fallback, &now);
    const uint64_t dx = now.exchanges - m->fb_last.exchanges, dw = now.wait_ns - m->fb_last.wait_ns;
    if (dx && m->fb_pairs > 0 && !m->fb_mixed) {
        const double per = (double)dw / (double)dx;
        if (m->fb_pairs <= m->n_used) {
            m->cpu_a = m->have_a ? 0.8 * m->cpu_a + 0.2 * per : per;
            m->have_a = true;
        } else {
            const double b = (per - (m->have_a ? m->cpu_a : 0.0)) / (double)m->fb_pairs;
            const int k = cpu_bucket(m->fb_pairs / m->n_used);
            if (b > 0) {
                m->cpu_b[k] = m->have_b[k] ? 0.5 * m->cpu_b[k] + 0.5 * b : b;
                m->have_b[k] = true;
            }
        }
    }
    m->fb_last = now;
    m->fb_pairs = 0;
    m->fb_mixed = false;
}

/* A sample of the CPU side's time for `pairs` expected pairs: exact when the device waited for it, an upper
 * bound otherwise. */
static void cpu_sample(moe_gpu_t *m, double pairs, double ns, bool exact)
{
    if (pairs <= 0 || ns <= 0)
        return;
    const double b = (ns - (m->have_a ? m->cpu_a : 0.0)) / pairs;
    const int k = cpu_bucket(m->pass_n);
    if (b <= 0)
        return;
    if (exact)
        m->cpu_b[k] = m->have_b[k] ? 0.5 * m->cpu_b[k] + 0.5 * b : b;
    else if (m->have_b[k] && m->cpu_b[k] > b)
        m->cpu_b[k] = 0.5 * (m->cpu_b[k] + b); /* faster than predicted: the device did not wait */
    else if (!m->have_b[k])
        return;
    m->have_b[k] = true;
}

/* The CPU side's time per pair for batches of n tokens: its own size's measure, else a smaller size's (an
 * upper bound), else a larger size's doubled; < 0 when nothing was measured. */
static double cpu_b_for(const moe_gpu_t *m, int32_t n)
{
    const int k = cpu_bucket(n);
    if (m->have_b[k])
        return m->cpu_b[k];
    for (int j = k - 1; j >= 0; j--)
        if (m->have_b[j])
            return m->cpu_b[j];
    for (int j = k + 1; j < CPU_BUCKETS; j++)
        if (m->have_b[j])
            return 2 * m->cpu_b[j];
    return -1;
}

/* After a streamed pass (its stream complete): the copy, product and CPU costs it measured, and its counters. */
static void pass_fold(moe_gpu_t *m)
{
    if (!m->pass_timed)
        return;
    m->pass_timed = false;
    uint64_t copy_ns = 0, bytes = 0;
    xs_stats_t before, after;
    xs_stats(m->xs, &before);
    xs_pass_end(m->xs, &copy_ns, &bytes);
    xs_stats(m->xs, &after);
    if (bytes && copy_ns)
        expert_cost_add(&m->copy_cost, (double)bytes, (double)copy_ns);
    const double span = ev_ns(m->pass_ev[0], m->pass_ev[1]);
    double cpu_wait = 0;
    int32_t prev = -2;
    pass_phases_t ph = {0};
    if (m->fallback) { /* the device's spin for the CPU side this step (counters copied at its end) */
        moe_exec_stats_t now;
        moe_exec_stats(m->fallback, &now);
        ph.cpu_spin = (double)(now.wait_ns - m->fb_last.wait_ns);
    }
    for (int32_t il = 0; il < m->n_layer; il++) {
        gpu_layer_t *L = &m->layers[il];
        if (!L->timed)
            continue;
        L->timed = false;
        ph.layers++;
        if (prev == il - 1) { /* the dense part between two timed layers */
            const double d = ev_ns(m->layers[prev].ev[EV_COLLECTED], L->ev[EV_IN]);
            if (d > 0 && m->pass_n > 0)
                expert_cost_add(&m->dense_cost, (double)m->pass_n, d);
            ph.dense += d > 0 ? d : 0;
        }
        prev = il;
        const bool whole_cpu = !L->n_streamed;
        if (!whole_cpu) {
            const double w = xs_layer_wait_ns(m->xs, il), r01 = ev_ns(L->ev[EV_RUN0], L->ev[EV_RUN1]);
            const double run = r01 - w;
            if (run > 0 && L->exp_gpu_pairs > 0)
                expert_cost_add(&m->gpu_cost, L->exp_gpu_pairs, run);
            const double pre = ev_ns(L->ev[L->cpu_timed ? EV_POSTED : EV_IN], L->ev[EV_RUN0]),
                         col = ev_ns(L->ev[EV_RUN1], L->ev[EV_COLLECTED]);
            ph.pre += pre > 0 ? pre : 0;
            ph.products += r01 > 0 ? r01 : 0;
            ph.copy_wait += w > 0 ? w : 0;
            ph.collect += col > 0 ? col : 0;
        }
        if (!L->cpu_timed)
            continue;
        L->cpu_timed = false;
        /* posting the exchange: the device's fixed share of a CPU part, per token of the batch */
        const double post = ev_ns(L->ev[EV_IN], L->ev[EV_POSTED]);
        if (post > 0 && m->pass_n > 0)
            expert_cost_add(&m->post_cost, (double)m->pass_n, post);
        ph.post += post > 0 ? post : 0;
        if (whole_cpu) {
            const double col = ev_ns(L->ev[EV_POSTED], L->ev[EV_COLLECTED]);
            ph.collect += col > 0 ? col : 0;
            ph.cpu_only++;
        } else {
            ph.split++;
        }
        const double total = ev_ns(L->ev[EV_POSTED], L->ev[EV_COLLECTED]);
        /* split: the products end before the collect, and waiting past them means the CPU side was the slower;
         * whole: the device waits for all of it */
        const double waited = whole_cpu ? total : ev_ns(L->ev[EV_RUN1], L->ev[EV_COLLECTED]);
        if (waited > 0)
            cpu_wait += waited;
        if (total > 0 && waited >= 0)
            cpu_sample(m, L->exp_cpu_pairs, total, whole_cpu || waited > 0.05 * total);
    }
    m->stream_passes++;
    m->copy_busy_ns += after.copy_ns - before.copy_ns;
    m->copy_wait_ns += after.wait_ns - before.wait_ns;
    m->cpu_wait_ns += (uint64_t)cpu_wait;
    m->stream_span_ns += span > 0 ? (uint64_t)span : 0;
    guild_log(GUILD_LOG_INFO, "cuda moe: streamed pass of %d tokens: %.1f ms on the device; %d layers timed (%d split "
              "with the CPU side, %d wholly on it): dense parts between them %.1f ms, exchanges posted %.1f ms, "
              "device experts before the streamed ones %.1f ms, streamed products %.1f ms (waiting %.1f ms for "
              "copies), collects %.1f ms (the device spinning for the CPU side %.1f ms)", m->pass_n, span / 1e6,
              ph.layers, ph.split, ph.cpu_only, ph.dense / 1e6, ph.post / 1e6, ph.pre / 1e6, ph.products / 1e6,
              ph.copy_wait / 1e6, ph.collect / 1e6, ph.cpu_spin / 1e6);
    if (!m->cost_logged && cpu_b_for(m, m->pass_n) > 0 && expert_cost_known(&m->copy_cost)) {
        m->cost_logged = true;
        guild_log(GUILD_LOG_INFO, "cuda moe: streamed pass measured: copies %.1f GB/s, device experts %.2f us per "
                  "pair, dense part %.2f us per token a layer, CPU experts %.2f us per pair in batches of %d (+ %.1f "
                  "us per exchange)", 1.0 / expert_cost_ns_per_unit(&m->copy_cost),
                  expert_cost_ns_per_unit(&m->gpu_cost) / 1e3, expert_cost_ns_per_unit(&m->dense_cost) / 1e3,
                  cpu_b_for(m, m->pass_n) / 1e3, m->pass_n, m->cpu_a / 1e3);
    }
}

static bool capturing(cudaStream_t s)
{
    enum cudaStreamCaptureStatus cs;
    if (cudaStreamIsCapturing(s, &cs) != cudaSuccess) {
        (void)cudaGetLastError();
        return true;
    }
    return cs != cudaStreamCaptureStatusNone;
}

/* Plans the pass at its first batch: per layer, the experts the device streams (pass ranks), queued. */
static int pass_plan(moe_gpu_t *m, int32_t n, cudaStream_t s, guild_err_t *err)
{
    m->pass_planned = true;
    m->pass_stream = false;
    for (int32_t il = 0; il < m->n_layer; il++) {
        gpu_layer_t *L = &m->layers[il];
        L->n_streamed = 0;
        L->n_cpu = m->n_expert - L->n_res;
        L->timed = L->cpu_timed = false; /* a failed pass left them */
    }
    if (!m->xs || !m->fallback || n <= FEW_TOKENS || capturing(s))
        return 0;
    const double copy_bpns = expert_cost_known(&m->copy_cost) ? 1.0 / expert_cost_ns_per_unit(&m->copy_cost)
                                                               : m->pcie_bpns;
    if (copy_bpns <= 0)
        return 0;
    const double fair = (double)n * (double)m->n_used / (double)m->n_expert; /* expected pairs per expert */
    /* a CPU part's exchange on the compute stream: posting the batch (measured; before that, its activations'
     * bytes at the copy rate) and each CPU pair's row of y read back over the same link */
    const double row_ns = (double)m->n_embd * sizeof(float) / copy_bpns;
    const double post_ns = expert_cost_known(&m->post_cost) ? expert_cost_ns_per_unit(&m->post_cost) * (double)n
                                                            : (double)n * row_ns;
    /* before the CPU side's time per pair is measured, the first streamable layer goes to it whole */
    const double cpu_b = cpu_b_for(m, n);
    const bool bootstrap = cpu_b < 0 && m->force_split < 0;
    const expert_split_model_t em = {.copy_bpns = copy_bpns,
                                     .gpu_ns_per_pair = expert_cost_ns_per_unit(&m->gpu_cost) / PAIR_UNITS,
                                     .cpu_a_ns = m->have_a ? m->cpu_a : 0.0,
                                     .cpu_b_ns = (cpu_b > 0 ? cpu_b : 0.0) * CPU_MARGIN / PAIR_UNITS,
                                     .force_gpu_fraction = m->force_split, .pipelined = true,
                                     .copy_hidden_ns = expert_cost_ns_per_unit(&m->dense_cost) * (double)n,
                                     .xchg_ns = post_ns, .xchg_ns_per_pair = row_ns / PAIR_UNITS};
    m->pass_n = n;
    xs_pass_begin(m->xs);
    bool first = true;
    for (int32_t il = 0; il < m->n_layer; il++) {
        gpu_layer_t *L = &m->layers[il];
        if (!xs_layer_streams(m->xs, il) || L->n_res == m->n_expert)
            continue;
        if (bootstrap && first) {
            first = false;
            continue;
        }
        first = false;
        const uint64_t eb = xs_expert_bytes(m->xs, il);
        for (int32_t e = 0; e < m->n_expert; e++) {
            const bool cand = L->base.rank[e] < 0;
            m->count[e] = cand ? (int32_t)(fair * PAIR_UNITS + 0.5) > 0 ? (int32_t)(fair * PAIR_UNITS + 0.5) : 1 : 0;
            m->ebytes[e] = eb;
        }
        expert_split_result_t r;
        if (bootstrap) { /* everything streamable on the device */
            memset(&r, 0, sizeof r);
            for (int32_t e = 0; e < m->n_expert; e++)
                m->on_gpu[e] = m->count[e] > 0;
        } else {
            expert_split_plan(m->split, m->count, m->ebytes, &em, m->on_gpu, &r);
        }
        int32_t k = 0;
        L->pass = L->base;
        for (int32_t e = 0; e < m->n_expert; e++)
            if (m->on_gpu[e]) {
                L->pass.rank[e] = (int16_t)(L->n_res + k);
                m->ids_buf[k++] = e;
            }
        /* the plan's counters: expected pairs, exact in sum (the layer's non-resident pairs) */
        const uint64_t all_pairs = (uint64_t)(fair * (m->n_expert - L->n_res) + 0.5),
                       gpu_pairs = (uint64_t)(fair * k + 0.5);
        m->split_gpu_experts += (uint64_t)k;
        m->split_cpu_experts += (uint64_t)(m->n_expert - L->n_res - k);
        m->split_gpu_pairs += gpu_pairs;
        m->split_cpu_pairs += all_pairs - gpu_pairs;
        if (!k)
            continue;
        if (xs_add_layer(m->xs, il, m->ids_buf, k, L->n_res, err) < 0)
            return -1;
        L->n_streamed = k;
        L->n_cpu = m->n_expert - L->n_res - k;
        L->exp_gpu_pairs = fair * k;
        L->exp_cpu_pairs = fair * L->n_cpu;
        m->pass_stream = true;
    }
    if (!m->pass_stream)
        return 0;
    if (xs_pump(m->xs, err) < 0)
        return -1;
    return 0;
}

/* The pairs per tile of a layer's products for batches of n tokens. */
static int32_t part_tile(const moe_gpu_t *m, const gpu_layer_t *L, int32_t n)
{
    if (n * m->n_used >= MMA_PAIRS_PER_EXPERT * m->n_expert && cuda_expert_mma_supported(L->gate_type) &&
        cuda_expert_mma_supported(L->down_type))
        return CUDA_EXPERT_MMA_TILE;
    return n <= ONE_PAIR_TOKENS ? 1 : 8;
}

/* A layer's products for n tokens go through cuda_expert_pairs (fused launches, the same bits): tiles of one pair,
 * neither gpt-oss's biases nor a test's no_fuse, types and widths the kernel takes. */
static bool fold_pairs(const moe_gpu_t *m, const gpu_layer_t *L, int32_t n)
{
    return m->fuse && !L->oai && part_tile(m, L, n) == 1 && n * m->n_used <= 65535 &&
           cuda_expert_pairs_take(L->gate_type, m->n_embd) && cuda_expert_pairs_take(L->down_type, m->n_ff);
}

/* The products of one device part: its experts' matrices at gate/up/down (local id j at + j * stride), n_local
 * experts, ranks lo .. lo + n_local - 1 of the layer's device experts; x already quantized (act_x). The layer
 * routed once (m->layer_routed): the part's tiles are taken from that routing and its rows of h are those whose
 * rank (d_loc) is the part's; else the pairs' local ids are lids (others < 0), routed here. */
static int run_part(moe_gpu_t *m, const gpu_layer_t *L, const char *gate, const char *up, const char *down,
                    size_t gu_stride, size_t d_stride, size_t gate_row, size_t down_row, int32_t n_local, int32_t n,
                    const int32_t *lids, const int32_t *ids, int32_t lo, const float *qx, cudaStream_t s,
                    guild_err_t *err)
{
    const int32_t pairs = n * m->n_used;
    const int32_t tile = part_tile(m, L, n);
    const int32_t mt = cuda_expert_max_tiles(pairs, n_local, tile);
    const guild_type_t ht = quant_type_info(L->down_type)->dot_type;
    if (m->layer_routed) {
        int32_t *pt = m->tiles + 4 * (size_t)(m->tiles_rows / 2), *pn = m->tiles + 4 * (size_t)(m->tiles_rows - 1);
        return cuda_expert_tiles_range(m->tiles, m->n_tiles, lo, lo + n_local, pt, pn, s, err) < 0 ||
                       cuda_expert_matmul(L->gate_type, m->n_embd, m->n_ff, gate, up, gu_stride, gate_row, m->act_x,
                                          m->ax_row, m->n_used, m->order, pt, pn, mt, tile, m->h, m->n_ff, s,
                                          err) < 0 ||
                       cuda_quantize_rows(ht, m->h, m->n_ff, m->act_h, m->ah_row, m->n_ff, pairs, m->d_loc, lo,
                                          lo + n_local, s, err) < 0 ||
                       cuda_expert_matmul(L->down_type, m->n_ff, m->n_embd, down, NULL, d_stride, down_row,
                                          m->act_h, m->ah_row, 1, m->order, pt, pn, mt, tile, m->y, m->n_embd, s,
                                          err) < 0
                   ? -1
                   : 0;
    }
    if (L->oai) { /* gate and up apart, then their biases and swiglu_oai; the down bias after the down products */
        const int32_t *gid = ids;
        if (lids != ids) {
            if (cuda_expert_ids_keep(ids, lids, pairs, m->d_gid, s, err) < 0)
                return -1;
            gid = m->d_gid;
        }
        return cuda_expert_route(lids, pairs, n_local, tile, m->order, m->tiles, m->n_tiles, s, err) < 0 ||
                       cuda_expert_matmul(L->gate_type, m->n_embd, m->n_ff, gate, NULL, gu_stride, gate_row,
                                          m->act_x, m->ax_row, m->n_used, m->order, m->tiles, m->n_tiles, mt, tile,
                                          m->h, m->n_ff, s, err) < 0 ||
                       cuda_expert_matmul(L->gate_type, m->n_embd, m->n_ff, up, NULL, gu_stride, gate_row, m->act_x,
                                          m->ax_row, m->n_used, m->order, m->tiles, m->n_tiles, mt, tile, m->u,
                                          m->n_ff, s, err) < 0 ||
                       cuda_expert_swiglu_oai(m->h, m->u, gid, pairs, m->n_ff, L->gate_b, L->up_b, L->alpha,
                                              L->limit, s, err) < 0 ||
                       cuda_quantize_rows(ht, m->h, m->n_ff, m->act_h, m->ah_row, m->n_ff, pairs, lids, 0,
                                          INT32_MAX, s, err) < 0 ||
                       cuda_expert_matmul(L->down_type, m->n_ff, m->n_embd, down, NULL, d_stride, down_row,
                                          m->act_h, m->ah_row, 1, m->order, m->tiles, m->n_tiles, mt, tile, m->y,
                                          m->n_embd, s, err) < 0 ||
                       cuda_expert_add_bias(m->y, gid, pairs, m->n_embd, L->down_b, s, err) < 0
                   ? -1
                   : 0;
    }
    /* qx: x not yet quantized; the route's launch does it (a decode step's rows) */
    if ((qx ? cuda_expert_route_quantize(lids, pairs, n_local, tile, m->order, m->tiles, m->n_tiles,
                                         quant_type_info(L->gate_type)->dot_type, qx, m->n_embd, m->act_x, m->ax_row,
                                         m->n_embd, n, s, err)
            : cuda_expert_route(lids, pairs, n_local, tile, m->order, m->tiles, m->n_tiles, s, err)) < 0 ||
        cuda_expert_matmul(L->gate_type, m->n_embd, m->n_ff, gate, up, gu_stride, gate_row, m->act_x, m->ax_row,
                           m->n_used, m->order, m->tiles, m->n_tiles, mt, tile, m->h, m->n_ff, s, err) < 0 ||
        cuda_quantize_rows(ht, m->h, m->n_ff, m->act_h, m->ah_row, m->n_ff, pairs, lids, 0, INT32_MAX, s, err) < 0 ||
        cuda_expert_matmul(L->down_type, m->n_ff, m->n_embd, down, NULL, d_stride, down_row, m->act_h, m->ah_row,
                           1, m->order, m->tiles, m->n_tiles, mt, tile, m->y, m->n_embd, s, err) < 0)
        return -1;
    return 0;
}

/* One product of a step of n tokens without a route (cuda_expert_pairs' arguments): from a few tokens on the pairs
 * share experts, and the tensor-core kernel (the same bits) takes the types where its rule says it is faster. */
static int step_pairs(int32_t n, guild_type_t type, int64_t in, int64_t rows, const void *w, const void *w_up,
                      size_t expert_stride, size_t row_stride, const float *x, int64_t ldx, int32_t act_div,
                      const int32_t *lids, int32_t n_local, int32_t pairs, float *out, int64_t ldo, bool early,
                      cudaStream_t s, guild_err_t *err)
{
    if (cuda_expert_pairs_mma_take(type, in, n))
        return cuda_expert_pairs_mma(type, in, rows, w, w_up, expert_stride, row_stride, x, ldx, act_div, lids,
                                     n_local, pairs, out, ldo, NULL, early, s, err);
    return cuda_expert_pairs(type, in, rows, w, w_up, expert_stride, row_stride, x, ldx, act_div, lids, n_local, pairs,
                             out, ldo, 0, early, s, err);
}

/* Every device part of layer `layer`: the resident experts, then this pass's staged chunks. */
static int run_device(moe_gpu_t *m, int32_t layer, int32_t n, const float *x, const int32_t *ids, bool streamed,
                      cudaStream_t s, guild_err_t *err)
{
    gpu_layer_t *L = &m->layers[layer];
    const cuda_rank_table_t *rt = streamed ? &L->pass : &L->base;
    const int32_t P = n * m->n_used;
    const guild_type_t at = quant_type_info(L->gate_type)->dot_type;
    m->layer_routed = false;
    const bool whole = L->n_res == m->n_expert, fold = whole && !L->oai && m->fuse;
    if (!streamed && fold_pairs(m, L, n)) { /* a few tokens' pairs: no route, each block quantizes its row */
        const int32_t *lids = ids;
        if (!L->n_res)
            return 0;
        if (!whole) {
            if (cuda_expert_ids_map(ids, P, rt, m->n_expert, 0, L->n_res, m->d_loc, s, err) < 0)
                return -1;
            lids = m->d_loc;
        }
        return step_pairs(n, L->gate_type, m->n_embd, m->n_ff, L->gate, L->up, L->gate_mat, L->gate_row, x,
                          m->n_embd, m->n_used, lids, L->n_res, P, m->h, m->n_ff, false, s, err) < 0 ||
                       step_pairs(n, L->down_type, m->n_ff, m->n_embd, L->down, NULL, L->down_mat, L->down_row, m->h,
                                  m->n_ff, 1, lids, L->n_res, P, m->y, m->n_embd, true, s, err) < 0
                   ? -1
                   : 0;
    }
    if (!fold && cuda_quantize(at, x, m->n_embd, m->act_x, m->ax_row, m->n_embd, n, s, err) < 0)
        return -1;
    if (whole) /* the whole layer: ranks are ids */
        return run_part(m, L, L->gate, L->up, L->down, L->gate_mat, L->down_mat, L->gate_row, L->down_row,
                        m->n_expert, n, ids, ids, 0, fold ? x : NULL, s, err);
    /* a streamed layer's parts share one routing of the batch over the device's ranks (a one-block kernel over
     * every pair, which each staged chunk would otherwise repeat): each part takes its range of the tiles. It
     * needs room for two tile tables: tiles of the tensor-core kernel's size, which take many pairs a tile. */
    const int32_t n_dev = L->n_res + (streamed ? L->n_streamed : 0), tile = part_tile(m, L, n);
    if (streamed && !L->oai && tile == CUDA_EXPERT_MMA_TILE &&
        2 * (cuda_expert_max_tiles(P, n_dev, tile) + 1) <= m->tiles_rows) {
        if (cuda_expert_ids_map(ids, P, rt, m->n_expert, 0, n_dev, m->d_loc, s, err) < 0 ||
            cuda_expert_route(m->d_loc, P, n_dev, tile, m->order, m->tiles, m->n_tiles, s, err) < 0)
            return -1;
        m->layer_routed = true;
    }
    if (L->n_res && ((!m->layer_routed &&
                      cuda_expert_ids_map(ids, P, rt, m->n_expert, 0, L->n_res, m->d_loc, s, err) < 0) ||
                     run_part(m, L, L->gate, L->up, L->down, L->gate_mat, L->down_mat, L->gate_row, L->down_row,
                              L->n_res, n, m->d_loc, ids, 0, NULL, s, err) < 0))
        return -1;
    if (!streamed)
        return 0;
    xs_chunk_t c;
    int rc;
    int32_t covered = 0;
    /* the products' time: from here to the last chunk's end, less the waits for the chunks' copies */
    if (L->timed && cuda_check(cudaEventRecord(L->ev[EV_RUN0], s), "timing event", err) < 0)
        return -1;
    while ((rc = xs_next(m->xs, layer, s, &c, err)) == 0) {
        covered += c.hi - c.lo;
        if ((!m->layer_routed && cuda_expert_ids_map(ids, P, rt, m->n_expert, c.lo, c.hi, m->d_loc, s, err) < 0) ||
            run_part(m, L, c.gate, c.up, c.down, c.gu_stride, c.d_stride, c.gate_row, c.down_row, c.hi - c.lo, n,
                     m->d_loc, ids, c.lo, NULL, s, err) < 0 ||
            xs_done(m->xs, &c, s, err) < 0)
            return guild_err_prefix(err, "streamed experts: ");
    }
    if (rc < 0 || (L->timed && cuda_check(cudaEventRecord(L->ev[EV_RUN1], s), "timing event", err) < 0))
        return -1;
    if (covered != L->n_streamed) /* the pass's queue is out of step with the layers */
        return guild_err_set(err, "%d of the %d streamed experts staged", covered, L->n_streamed);
    m->streamed++;
    return 0;
}

static int gpu_submit(moe_exec_t *base, int32_t layer, int32_t n, const float *x, const int32_t *ids, void *queue,
                      guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    cudaStream_t s = queue;
    if (layer < 0 || layer >= m->n_layer)
        return guild_err_set(err, "cuda moe: layer %d of %d", layer, m->n_layer);
    if (n < 1 || n > m->max_tokens)
        return guild_err_set(err, "cuda moe: %d tokens in an exchange (1..%d)", n, m->max_tokens);
    if (m->pass_planned && layer <= m->last_layer) { /* a new pass without step_begin (tests) */
        pass_fold(m);
        m->pass_planned = false;
    }
    m->last_layer = layer;
    m->pending = false; /* a failed step's, never enqueued */
    if (!m->pass_planned && pass_plan(m, n, s, err) < 0)
        return guild_err_prefix(err, "layer %d: ", layer);
    if (m->pass_stream && m->pass_open && m->n_collected >= LAG &&
        cuda_moe_sync(m->fallback, m->lag[(m->n_collected - LAG) % LAG_N], err) < 0)
        return guild_err_prefix(err, "layer %d: ", layer);
    gpu_layer_t *L = &m->layers[layer];
    const bool streamed = m->pass_stream && L->n_streamed > 0;
    const int32_t n_dev = L->n_res + (streamed ? L->n_streamed : 0);
    m->layer = layer;
    m->n = n;
    m->dev = n_dev > 0;
    m->cpu = m->dev && n_dev < m->n_expert;
    if (!m->dev) { /* all on the CPU side */
        m->fb_pairs = n * m->n_used;
        if (m->pass_stream && m->pass_open && !capturing(s)) {
            L->timed = L->cpu_timed = true;
            L->exp_cpu_pairs = (double)n * m->n_used;
            L->n_streamed = 0;
        }
        if ((L->timed && cuda_check(cudaEventRecord(L->ev[EV_IN], s), "timing event", err) < 0) ||
            m->fallback->ops->submit(m->fallback, layer, n, x, ids, s, err) < 0 ||
            (L->cpu_timed && cuda_check(cudaEventRecord(L->ev[EV_POSTED], s), "timing event", err) < 0))
            return -1;
        return 0;
    }
    L->timed = streamed && m->pass_open;
    L->cpu_timed = L->timed && m->cpu;
    if (L->timed && cuda_check(cudaEventRecord(L->ev[EV_IN], s), "timing event", err) < 0)
        return -1;
    if (m->cpu) {
        m->fb_mixed = true;
        const cuda_rank_table_t *rt = streamed ? &L->pass : &L->base;
        if (cuda_expert_ids_map(ids, n * m->n_used, rt, m->n_expert, -1, -1, m->d_cpu, s, err) < 0 ||
            m->fallback->ops->submit(m->fallback, layer, n, x, m->d_cpu, s, err) < 0 ||
            (L->cpu_timed && cuda_check(cudaEventRecord(L->ev[EV_POSTED], s), "timing event", err) < 0))
            return -1;
    }
    if (m->cpu && m->d_hint && !streamed) {
        /* a prefetch hint for the next layer may come before collect: the CPU workers get it before the device's
         * products here are enqueued, not after them (they run while the CPU side computes, either way) */
        m->pending = true;
        m->pend_x = x;
        m->pend_ids = ids;
        return 0;
    }
    if (run_device(m, layer, n, x, ids, streamed, s, err) < 0)
        return guild_err_prefix(err, "layer %d: device experts: ", layer);
    return 0;
}

/* The device products that gpu_submit left for after the hint, enqueued now (none left: nothing). */
static int run_pending(moe_gpu_t *m, cudaStream_t s, guild_err_t *err)
{
    if (!m->pending)
        return 0;
    m->pending = false;
    if (run_device(m, m->layer, m->n, m->pend_x, m->pend_ids, false, s, err) < 0)
        return guild_err_prefix(err, "layer %d: device experts: ", m->layer);
    return 0;
}

static int32_t gpu_hint_experts(const moe_exec_t *base)
{
    const moe_gpu_t *m = (const moe_gpu_t *)base;
    return m->d_hint ? moe_exec_hint_experts(m->fallback) : 0;
}

/* Whether a prefetch hint for `layer` (the next one), given after the submit of the layer before, has anything to
 * do: the fallback takes hints, the submit published an exchange to carry it (not when the device computed that
 * layer all), and the device does not compute `layer` whole. */
static bool gpu_hint_wanted(const moe_exec_t *base, int32_t layer)
{
    const moe_gpu_t *m = (const moe_gpu_t *)base;
    if (!m->d_hint || layer < 0 || layer >= m->n_layer || (m->dev && !m->cpu))
        return false;
    const gpu_layer_t *L = &m->layers[layer];
    return L->n_res + (m->pass_stream ? L->n_streamed : 0) < m->n_expert;
}

/* The hint passed to the fallback, whose CPU workers it is for, naming only the experts they will compute: the
 * ids of those this pass computes on the device masked (skip slots: cuda_expert_ids_map's CPU side); nothing when
 * gpu_hint_wanted says so. At most GUILD_EXCHANGE_HINT_MAX rows (the most a hint's room takes one id of). */
static int gpu_hint_pass(moe_gpu_t *m, int32_t layer, int32_t n, const int32_t *ids, cudaStream_t s, guild_err_t *err)
{
    if (n < 1 || !gpu_hint_wanted(&m->base, layer))
        return 0;
    const gpu_layer_t *L = &m->layers[layer];
    const bool streamed = m->pass_stream && L->n_streamed > 0;
    if (!L->n_res && !streamed)
        return moe_exec_hint(m->fallback, layer, n, ids, s, err);
    if (n > (int32_t)GUILD_EXCHANGE_HINT_MAX)
        n = (int32_t)GUILD_EXCHANGE_HINT_MAX;
    return cuda_expert_ids_map(ids, n * m->n_used, streamed ? &L->pass : &L->base, m->n_expert, -1, -1, m->d_hint, s,
                               err) < 0
               ? -1
               : moe_exec_hint(m->fallback, layer, n, m->d_hint, s, err);
}

/* ... then the device's products of the exchange in flight, which its submit left for after the hint. */
static int gpu_hint(moe_exec_t *base, int32_t layer, int32_t n, const int32_t *ids, void *queue, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    cudaStream_t s = queue;
    return gpu_hint_pass(m, layer, n, ids, s, err) < 0 ? -1 : run_pending(m, s, err);
}

static int lag_mark(moe_gpu_t *m, cudaStream_t s, guild_err_t *err)
{
    if (!m->pass_stream || !m->pass_open)
        return 0;
    return cuda_check(cudaEventRecord(m->lag[m->n_collected++ % LAG_N], s), "lag event", err);
}

static int gpu_collect_layer(moe_gpu_t *m, const float **y, cudaStream_t s, guild_err_t *err)
{
    gpu_layer_t *L = &m->layers[m->layer];
    if (!m->dev) {
        return m->fallback->ops->collect(m->fallback, y, s, err) < 0 ||
                       (L->cpu_timed && cuda_check(cudaEventRecord(L->ev[EV_COLLECTED], s), "timing event", err) < 0)
                   ? -1
                   : 0;
    }
    if (m->cpu) {
        /* the CPU side's rows only, where they lie when the executor can, else all of its y and a merge */
        const float *yc = NULL;
        if ((m->fallback->ops->collect_rows
                 ? m->fallback->ops->collect_rows(m->fallback, m->y, m->d_cpu, s, err)
                 : m->fallback->ops->collect(m->fallback, &yc, s, err) < 0
                       ? -1
                       : cuda_expert_merge(m->y, yc, m->d_cpu, m->n * m->n_used, m->n_embd, s, err)) < 0)
            return -1;
    }
    if (L->timed && cuda_check(cudaEventRecord(L->ev[EV_COLLECTED], s), "timing event", err) < 0)
        return -1;
    *y = m->y;
    return 0;
}

static int gpu_collect(moe_exec_t *base, const float **y, void *queue, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    cudaStream_t s = queue;
    if (run_pending(m, s, err) < 0) /* no hint came between submit and collect */
        return -1;
    const int rc = gpu_collect_layer(m, y, s, err);
    return rc < 0 ? rc : lag_mark(m, s, err);
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
    pass_fold(m); /* the last step ended with the stream idle */
    cost_update(m);
    m->pass_planned = false;
    m->pass_open = true;
    m->last_layer = -1;
    m->n_collected = 0;
    if (m->xs && !capturing(s)) {
        if (cuda_check(cudaEventRecord(m->pass_ev[0], s), "timing event", err) < 0)
            return -1;
    }
    return m->fallback ? cuda_moe_step_begin(m->fallback, s, err) : 0;
}

static int gpu_step_end(moe_exec_t *base, void *queue, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    cudaStream_t s = queue;
    if (m->pass_open && m->pass_stream) {
        if (cuda_check(cudaEventRecord(m->pass_ev[1], s), "timing event", err) < 0)
            return -1;
        m->pass_timed = true;
    }
    m->pass_open = false;
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
    pass_fold(m); /* the step is complete: its costs and counters now, not at the next step */
    return m->fallback ? cuda_moe_result(m->fallback, err) : 0;
}

static void gpu_stats(const moe_exec_t *base, moe_exec_stats_t *out)
{
    const moe_gpu_t *m = (const moe_gpu_t *)base;
    xs_stats_t xst = {0};
    if (m->xs)
        xs_stats(m->xs, &xst);
    out->streamed = m->streamed;
    out->streamed_bytes = xst.bytes;
    out->split_gpu_experts = m->split_gpu_experts;
    out->split_cpu_experts = m->split_cpu_experts;
    out->split_gpu_pairs = m->split_gpu_pairs;
    out->split_cpu_pairs = m->split_cpu_pairs;
    out->stream_passes = m->stream_passes;
    out->stream_span_ns = m->stream_span_ns;
    out->copy_busy_ns = m->copy_busy_ns;
    out->copy_wait_ns = m->copy_wait_ns;
    out->cpu_wait_ns = m->cpu_wait_ns;
}

static void gpu_destroy(moe_exec_t *base)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    xs_destroy(&m->xs);
    for (int32_t il = 0; m->layers && il < m->n_layer; il++)
        for (int i = 0; i < N_EV; i++)
            if (m->layers[il].ev[i])
                cudaEventDestroy(m->layers[il].ev[i]);
    for (int i = 0; i < 2; i++)
        if (m->pass_ev[i])
            cudaEventDestroy(m->pass_ev[i]);
    for (int i = 0; i < LAG_N; i++)
        if (m->lag[i])
            cudaEventDestroy(m->lag[i]);
    void **bufs[] = {&m->mem, &m->act_x, (void **)&m->h, &m->act_h, (void **)&m->order, (void **)&m->tiles,
                     (void **)&m->n_tiles, (void **)&m->y, (void **)&m->d_loc, (void **)&m->d_cpu, (void **)&m->d_hint,
                     (void **)&m->u, &m->bias_mem, (void **)&m->d_gid};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        cuda_free(bufs[i]);
    expert_split_destroy(&m->split);
    cuda_stage_destroy(&m->own_stage);
    free(m->own_src);
    free(m->ids_buf);
    free(m->count);
    free(m->ebytes);
    free(m->on_gpu);
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
    .hint_experts = gpu_hint_experts,
    .hint = gpu_hint,
    .hint_wanted = gpu_hint_wanted,
};

void cuda_moe_gpu_set_fuse(moe_exec_t *base, bool fuse)
{
    ((moe_gpu_t *)base)->fuse = fuse;
}

void cuda_moe_gpu_force_split(moe_exec_t *base, double gpu_fraction)
{
    GUILD_ASSERT(base->ops == &gpu_ops);
    ((moe_gpu_t *)base)->force_split = gpu_fraction < 0 ? -1.0 : gpu_fraction;
}

void cuda_moe_gpu_set_stage(moe_exec_t *base, cuda_stage_t *stage)
{
    GUILD_ASSERT(base->ops == &gpu_ops && stage);
    moe_gpu_t *m = (moe_gpu_t *)base;
    if (m->xs)
        xs_set_stage(m->xs, stage);
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

/* The streamer over the non-resident experts of the computable layers, its copy rate probed. */
static int stream_setup(moe_gpu_t *m, const cuda_moe_gpu_layer_t *layers, int32_t n_slots, size_t slot,
                        cuda_stage_t *stage, expert_host_mats_t *own_src, size_t *bytes, guild_err_t *err)
{
    xs_layer_desc_t *d = calloc((size_t)m->n_layer, sizeof *d);
    if (!d)
        return guild_err_set(err, "cuda moe: out of memory");
    size_t largest = 0;
    int32_t probe = -1;
    for (int32_t il = 0; il < m->n_layer; il++) {
        const cuda_moe_gpu_layer_t *L = &layers[il];
        const gpu_layer_t *G = &m->layers[il];
        if (!G->computable || G->n_res == m->n_expert || !L->stream)
            continue;
        /* the CPU side's copies when every non-resident expert has one, else the file's tensors (kept here: the
         * streamer reads them as long as it lives) */
        const expert_host_mats_t *src = L->src;
        for (int32_t e = 0; src && e < m->n_expert; e++)
            if (G->base.rank[e] < 0 && !src[e].gate)
                src = NULL;
        expert_host_mats_t *o = own_src + (size_t)il * (size_t)m->n_expert;
        for (int32_t e = 0; e < m->n_expert; e++)
            o[e] = src ? src[e]
                       : (expert_host_mats_t){(const char *)L->gate + (size_t)e * L->gate_mat,
                                              (const char *)L->up + (size_t)e * L->gate_mat,
                                              (const char *)L->down + (size_t)e * L->down_mat, L->gate_row,
                                              L->gate_row, L->down_row, false, false, false};
        d[il] = (xs_layer_desc_t){L->gate_type, L->down_type, m->n_embd, m->n_ff, L->gate_row, L->down_row, o};
        const size_t e = 2 * round_up(L->gate_mat, 64) + round_up(L->down_mat, 64); /* a record of the copies */
        if (e * (size_t)m->n_expert > largest) {
            largest = e * (size_t)m->n_expert;
            probe = il;
        }
    }
    int rc = 0;
    slot = slot / ALIGN * ALIGN;
    if (probe >= 0) {
        if (!stage) {
            rc = cuda_stage_new_pageable(&m->own_stage, err);
            stage = m->own_stage;
        }
        if (rc == 0)
            rc = xs_new(&m->xs, d, m->n_layer, m->n_expert, slot, n_slots, stage, bytes, err);
        if (rc == 0)
            rc = xs_probe(m->xs, probe, &m->pcie_bpns, err);
        if (rc == 0)
            guild_log(GUILD_LOG_INFO, "cuda moe: streaming the experts the CPU side holds for large batches: %d "
                      "slots of %.1f MiB, copies at %.1f GB/s (probed)", n_slots, (double)slot / (1 << 20),
                      m->pcie_bpns);
    }
    free(d);
    return rc;
}

int cuda_moe_gpu_new(moe_exec_t **out, const cuda_moe_gpu_layer_t *layers, int32_t n_layer, int32_t n_expert,
                     int32_t max_tokens, int32_t n_embd, int32_t n_ff, int32_t n_used, int32_t n_slots,
                     size_t slot_bytes, cuda_stage_t *stage, moe_exec_t *fallback, size_t *bytes,
                     guild_err_t *err)
{
    *out = NULL;
    if (fallback && fallback->ops->mem != MOE_EXEC_DEVICE)
        return guild_err_set(err, "cuda moe: the executor for the other experts (\"%s\") works on host memory",
                             fallback->ops->name);
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
    m->last_layer = -1;
    expert_cost_init(&m->gpu_cost, 0.01, 1e8); /* plausible: 0.01 ns .. 0.1 s a pair; 1000 .. 0.01 GB/s */
    expert_cost_init(&m->copy_cost, 1e-3, 100);
    expert_cost_init(&m->dense_cost, 1, 1e8); /* 1 ns .. 0.1 s a token */
    expert_cost_init(&m->post_cost, 0.1, 1e6); /* 0.1 ns .. 1 ms a token */
    if (n_expert < 1 || n_expert > CUDA_RANK_TABLE_MAX) {
        guild_err_set(err, "cuda moe: %d experts (1..%d)", n_expert, CUDA_RANK_TABLE_MAX);
        goto fail;
    }
    if (!(m->layers = calloc((size_t)n_layer, sizeof *m->layers)) ||
        !(m->ids_buf = calloc((size_t)n_expert, sizeof *m->ids_buf)) ||
        !(m->count = calloc((size_t)n_expert, sizeof *m->count)) ||
        !(m->ebytes = calloc((size_t)n_expert, sizeof *m->ebytes)) || !(m->on_gpu = calloc((size_t)n_expert, 1)) ||
        !(m->own_src = calloc((size_t)n_layer * (size_t)n_expert, sizeof *m->own_src))) {
        guild_err_set(err, "cuda moe: out of memory");
        goto fail;
    }
    size_t total = 0, bias_total = 0;
    int32_t resident = 0, n_res_experts = 0;
    bool any_stream = false;
    for (int32_t il = 0; il < n_layer; il++) {
        const cuda_moe_gpu_layer_t *L = &layers[il];
        gpu_layer_t *D = &m->layers[il];
        for (int32_t e = 0; e < CUDA_RANK_TABLE_MAX; e++)
            D->base.rank[e] = -1;
        if (!L->gate)
            continue;
        int32_t nr = 0;
        for (int32_t e = 0; e < n_expert; e++)
            if (L->resident_experts ? L->resident_experts[e] != 0 : L->resident)
                D->base.rank[e] = (int16_t)nr++;
        if (!nr && (n_slots < 2 || !L->stream))
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
        D->computable = true;
        D->n_res = nr;
        D->gate_type = L->gate_type;
        D->down_type = L->down_type;
        D->gate_row = L->gate_row;
        D->gate_mat = L->gate_mat;
        D->down_row = L->down_row;
        D->down_mat = L->down_mat;
        if (L->oai) {
            D->oai = true;
            D->alpha = L->alpha;
            D->limit = L->limit;
            bias_total += round_up((size_t)n_expert * (size_t)(2 * n_ff + n_embd) * sizeof(float), ALIGN);
        }
        total += 2 * round_up(L->gate_mat * (size_t)nr, ALIGN) + round_up(L->down_mat * (size_t)nr, ALIGN);
        resident += nr == n_expert;
        n_res_experts += nr;
        any_stream = any_stream || (nr < n_expert && L->stream);
    }
    bool all_resident = true;
    for (int32_t il = 0; il < n_layer; il++)
        all_resident = all_resident && m->layers[il].n_res == n_expert;
    if (!all_resident && !fallback) {
        guild_err_set(err, "cuda moe: experts of %d layers are not on the device and there is no other executor",
                      n_layer - resident);
        goto fail;
    }
    size_t counted = 0;
    const size_t T = (size_t)max_tokens, P = T * (size_t)n_used;
    const int32_t mt = cuda_expert_max_tiles((int32_t)P, n_expert, 1);
    m->tiles_rows = mt;
    if (cuda_alloc(&m->mem, total, &counted, "the resident expert weights", err) < 0 ||
        cuda_alloc(&m->act_x, T * m->ax_row, &counted, "expert activations", err) < 0 ||
        cuda_alloc((void **)&m->h, P * (size_t)n_ff * sizeof(float), &counted, "expert activations", err) < 0 ||
        cuda_alloc(&m->act_h, P * m->ah_row, &counted, "expert activations", err) < 0 ||
        cuda_alloc((void **)&m->order, P * sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->tiles, (size_t)mt * 4 * sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->n_tiles, sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->d_loc, P * sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->d_cpu, P * sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->y, P * (size_t)n_embd * sizeof(float), &counted, "routed expert outputs", err) < 0 ||
        (!all_resident && moe_exec_hint_experts(fallback) > 0 &&
         cuda_alloc((void **)&m->d_hint, GUILD_EXCHANGE_HINT_MAX * (size_t)n_used * sizeof(int32_t), &counted,
                    "prefetch hint", err) < 0) ||
        (bias_total && (cuda_alloc(&m->bias_mem, bias_total, &counted, "the experts' biases", err) < 0 ||
                        cuda_alloc((void **)&m->u, P * (size_t)n_ff * sizeof(float), &counted, "expert activations",
                                   err) < 0 ||
                        cuda_alloc((void **)&m->d_gid, P * sizeof(int32_t), &counted, "expert routing", err) < 0)))
        goto fail;
    /* the oai layers' biases: on the device for resident and streamed layers alike (small beside the weights) */
    size_t boff = 0;
    for (int32_t il = 0; il < n_layer; il++) {
        const cuda_moe_gpu_layer_t *L = &layers[il];
        gpu_layer_t *D = &m->layers[il];
        if (!D->oai)
            continue;
        const size_t fb = (size_t)n_expert * (size_t)n_ff * sizeof(float),
                     eb = (size_t)n_expert * (size_t)n_embd * sizeof(float);
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
    /* the resident experts, rank by rank: gate, up, down regions of each layer */
    size_t off = 0;
    for (int32_t il = 0; il < n_layer; il++) {
        const cuda_moe_gpu_layer_t *L = &layers[il];
        gpu_layer_t *D = &m->layers[il];
        if (!D->computable || !D->n_res)
            continue;
        const size_t gb = round_up(L->gate_mat * (size_t)D->n_res, ALIGN);
        char *b = (char *)m->mem + off;
        D->gate = b;
        D->up = b + gb;
        D->down = b + 2 * gb;
        off += 2 * gb + round_up(L->down_mat * (size_t)D->n_res, ALIGN);
        for (int32_t e = 0; e < n_expert;) {
            if (D->base.rank[e] < 0) {
                e++;
                continue;
            }
            int32_t e1 = e + 1; /* a run of resident experts: one upload per matrix */
            while (e1 < n_expert && D->base.rank[e1] >= 0)
                e1++;
            const size_t r = (size_t)D->base.rank[e], k = (size_t)(e1 - e);
            if (cuda_check(cudaMemcpy((void *)(D->gate + r * L->gate_mat), (const char *)L->gate + e * L->gate_mat,
                                      k * L->gate_mat, cudaMemcpyHostToDevice), "upload expert weights", err) < 0 ||
                cuda_check(cudaMemcpy((void *)(D->up + r * L->gate_mat), (const char *)L->up + e * L->gate_mat,
                                      k * L->gate_mat, cudaMemcpyHostToDevice), "upload expert weights", err) < 0 ||
                cuda_check(cudaMemcpy((void *)(D->down + r * L->down_mat), (const char *)L->down + e * L->down_mat,
                                      k * L->down_mat, cudaMemcpyHostToDevice), "upload expert weights", err) < 0)
                goto fail;
            e = e1;
        }
    }
    for (int32_t il = 0; il < n_layer; il++)
        for (int i = 0; i < N_EV; i++)
            if (ev_create(&m->layers[il].ev[i], err) < 0)
                goto fail;
    if (ev_create(&m->pass_ev[0], err) < 0 || ev_create(&m->pass_ev[1], err) < 0)
        goto fail;
    for (int i = 0; i < LAG_N; i++)
        if (cuda_check(cudaEventCreateWithFlags(&m->lag[i], cudaEventDisableTiming), "create event", err) < 0)
            goto fail;
    const size_t before = counted;
    if (n_slots >= 2 && slot_bytes && any_stream && fallback) {
        if (expert_split_new(&m->split, n_expert, err) < 0 ||
            stream_setup(m, layers, n_slots, slot_bytes, stage, m->own_src, &counted, err) < 0)
            goto fail;
    }
    if (bytes)
        *bytes += counted;
    guild_log(GUILD_LOG_INFO, "cuda moe: %d experts of %d layers on the device (%d layers whole; %.1f MiB, buffers "
              "%.1f MiB)%s", n_res_experts, n_layer, resident, (double)total / (1 << 20),
              (double)(before - total) / (1 << 20), m->xs ? ", the others streamed for large batches" : "");
    *out = &m->base;
    return 0;
fail:
    gpu_destroy(&m->base);
    return -1;
}

cuda_moe_gpu_layer_t cuda_moe_gpu_layer_of(const model_layer_t *L, const model_expert_act_t *act)
{
    return (cuda_moe_gpu_layer_t){
        .gate = L->gate_exps.data,
        .up = L->up_exps.data,
        .down = L->down_exps.data,
        .gate_type = L->gate_exps.type,
        .down_type = L->down_exps.type,
        .gate_row = L->gate_exps.row_bytes,
        .gate_mat = L->gate_exps.mat_bytes,
        .down_row = L->down_exps.row_bytes,
        .down_mat = L->down_exps.mat_bytes,
        .oai = act->oai,
        .alpha = act->alpha,
        .limit = act->limit,
        .gate_b = L->gate_exps_b.data,
        .up_b = L->up_exps_b.data,
        .down_b = L->down_exps_b.data,
    };
}
