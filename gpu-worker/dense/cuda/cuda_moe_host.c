/* The "host" device executor: a host executor seen from the device, run on the host thread that drives the
 * backend. See cuda_moe.h. */
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_moe.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "ipc/doorbell.h" /* guild_now_ns */

typedef struct moe_host {
    moe_exec_t base;
    moe_exec_t *host;    /* borrowed, MOE_EXEC_HOST */
    int32_t max_tokens, n_embd, n_used;
    int32_t layer, n;    /* of the batch in flight */
    float *h_x;          /* pinned [max_tokens][n_embd] */
    int32_t *h_ids;      /* pinned [max_tokens][n_used] */
    float *d_y;          /* device [max_tokens][n_used][n_embd] */
    float *h_y;          /* pinned [max_tokens][n_used][n_embd], allocated at the first collect_rows: the CPU rows */
    cudaEvent_t inputs_ready;
    moe_exec_stats_t stats;
} moe_host_t;

static int host_submit(moe_exec_t *base, int32_t layer, int32_t n, const float *x, const int32_t *ids, void *queue,
                       guild_err_t *err)
{
    moe_host_t *m = (moe_host_t *)base;
    cudaStream_t s = queue;
    if (n < 1 || n > m->max_tokens)
        return guild_err_set(err, "cuda moe: %d tokens in an exchange (1..%d)", n, m->max_tokens);
    m->layer = layer;
    m->n = n;
    const size_t nk = (size_t)n * (size_t)m->n_used;
    if (cuda_check(cudaMemcpyAsync(m->h_x, x, (size_t)n * (size_t)m->n_embd * sizeof(float),
                                   cudaMemcpyDeviceToHost, s), "copy routed activations", err) < 0 ||
        cuda_check(cudaMemcpyAsync(m->h_ids, ids, nk * sizeof(int32_t), cudaMemcpyDeviceToHost, s),
                   "copy expert ids", err) < 0 ||
        cuda_check(cudaEventRecord(m->inputs_ready, s), "record routed inputs", err) < 0)
        return -1;
    return 0;
}

static int host_collect(moe_exec_t *base, const float **y, void *queue, guild_err_t *err)
{
    moe_host_t *m = (moe_host_t *)base;
    cudaStream_t s = queue;
    /* Only the copies must be done; the shared expert queued after them keeps the GPU busy meanwhile. */
    if (cuda_check(cudaEventSynchronize(m->inputs_ready), "wait for routed inputs", err) < 0)
        return -1;
    const uint64_t t0 = guild_now_ns();
    const float *hy = NULL;
    if (moe_exec_run(m->host, m->layer, m->n, m->h_x, m->h_ids, &hy, err) < 0)
        return -1;
    m->stats.exchanges++;
    m->stats.wait_ns += guild_now_ns() - t0;
    /* hy stays the host executor's until its next submit, which the next collect makes only after this copy
     * (same stream, earlier than the next inputs' event) */
    const size_t bytes = (size_t)m->n * (size_t)m->n_used * (size_t)m->n_embd * sizeof(float);
    if (cuda_check(cudaMemcpyAsync(m->d_y, hy, bytes, cudaMemcpyHostToDevice, s), "copy expert outputs", err) < 0)
        return -1;
    *y = m->d_y;
    return 0;
}

/* The CPU rows only (ids: the batch's, with the device's pairs as skip slots): copied into pinned memory at their
 * places and merged from there by the device, rather than all of y over PCIe: a split layer's few rows. */
static int host_collect_rows(moe_exec_t *base, float *y, const int32_t *ids, void *queue, guild_err_t *err)
{
    moe_host_t *m = (moe_host_t *)base;
    cudaStream_t s = queue;
    if (cuda_check(cudaEventSynchronize(m->inputs_ready), "wait for routed inputs", err) < 0)
        return -1;
    const uint64_t t0 = guild_now_ns();
    const float *hy = NULL;
    if (moe_exec_run(m->host, m->layer, m->n, m->h_x, m->h_ids, &hy, err) < 0)
        return -1;
    m->stats.exchanges++;
    m->stats.wait_ns += guild_now_ns() - t0;
    const size_t row = (size_t)m->n_embd;
    if (!m->h_y && cudaMallocHost((void **)&m->h_y, (size_t)m->max_tokens * (size_t)m->n_used * row * sizeof(float)) !=
                       cudaSuccess) {
        m->h_y = NULL;
        (void)cudaGetLastError();
        return guild_err_set(err, "cuda moe: cannot allocate pinned host memory for expert outputs");
    }
    /* h_y is rewritten by the next collect only after that batch's inputs are ready, i.e. after this merge */
    const int32_t P = m->n * m->n_used;
    for (int32_t p = 0; p < P; p++)
        if (m->h_ids[p] >= 0)
            memcpy(m->h_y + (size_t)p * row, hy + (size_t)p * row, row * sizeof(float));
    return cuda_expert_merge(y, m->h_y, ids, P, m->n_embd, s, err);
}

static void host_destroy(moe_exec_t *base)
{
    moe_host_t *m = (moe_host_t *)base;
    if (m->inputs_ready)
        cudaEventDestroy(m->inputs_ready);
    cudaFreeHost(m->h_x);
    cudaFreeHost(m->h_ids);
    if (m->h_y)
        cudaFreeHost(m->h_y);
    cuda_free((void **)&m->d_y);
    free(m);
}

static void host_stats(const moe_exec_t *base, moe_exec_stats_t *out)
{
    *out = ((const moe_host_t *)base)->stats;
}

static const moe_exec_ops_t host_ops = {
    .name = "host",
    .mem = MOE_EXEC_DEVICE,
    .submit = host_submit,
    .collect = host_collect,
    .destroy = host_destroy,
    .stats = host_stats,
    .collect_rows = host_collect_rows,
};

static int pinned(void **p, size_t bytes, guild_err_t *err)
{
    if (cudaMallocHost(p, bytes ? bytes : 1) != cudaSuccess) {
        *p = NULL;
        (void)cudaGetLastError();
        return guild_err_set(err, "cuda moe: cannot allocate %.1f MiB of pinned host memory",
                             (double)bytes / (1 << 20));
    }
    return 0;
}

int cuda_moe_host_new(moe_exec_t **out, moe_exec_t *host, int32_t max_tokens, int32_t n_embd, int32_t n_used,
                      guild_err_t *err)
{
    *out = NULL;
    GUILD_ASSERT(host->ops->mem == MOE_EXEC_HOST);
    moe_host_t *m = calloc(1, sizeof *m);
    if (!m)
        return guild_err_set(err, "cuda moe: out of memory");
    m->base.ops = &host_ops;
    m->host = host;
    m->max_tokens = max_tokens;
    m->n_embd = n_embd;
    m->n_used = n_used;
    const size_t T = (size_t)max_tokens, E = (size_t)n_embd, K = (size_t)n_used;
    if (pinned((void **)&m->h_x, T * E * sizeof(float), err) < 0 ||
        pinned((void **)&m->h_ids, T * K * sizeof(int32_t), err) < 0 ||
        cuda_alloc((void **)&m->d_y, T * K * E * sizeof(float), NULL, "routed expert outputs", err) < 0 ||
        cuda_check(cudaEventCreateWithFlags(&m->inputs_ready, cudaEventDisableTiming), "create event", err) < 0) {
        host_destroy(&m->base);
        return -1;
    }
    *out = &m->base;
    return 0;
}
