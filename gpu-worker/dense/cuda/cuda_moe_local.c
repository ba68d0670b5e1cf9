/* The "local" cuda_moe_t: the routed experts run in this process through a moe_exec_t, on the host thread that
 * drives the backend. See cuda_moe.h for the protocol. */
#include <stdlib.h>

#include "gpu-worker/dense/cuda/cuda_moe.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "ipc/doorbell.h" /* guild_now_ns */

typedef struct moe_local {
    cuda_moe_t base;
    moe_exec_t *exec;    /* borrowed */
    int32_t max_tokens, n_embd, n_used;
    int32_t layer, n;    /* of the exchange in flight */
    float *h_x;          /* pinned [max_tokens][n_embd] */
    int32_t *h_ids;      /* pinned [max_tokens][n_used] */
    float *h_y;          /* pinned [max_tokens][n_used][n_embd] */
    float *d_y;          /* device [max_tokens][n_used][n_embd] */
    cudaEvent_t inputs_ready;
    cuda_moe_stats_t stats;
} moe_local_t;

static int local_submit(cuda_moe_t *base, int32_t layer, int32_t n, const float *x, const int32_t *ids,
                        cudaStream_t s, guild_err_t *err)
{
    moe_local_t *m = (moe_local_t *)base;
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

static int local_collect(cuda_moe_t *base, const float **y, cudaStream_t s, guild_err_t *err)
{
    moe_local_t *m = (moe_local_t *)base;
    /* Only the copies must be done; the shared expert queued after them keeps the GPU busy meanwhile. */
    if (cuda_check(cudaEventSynchronize(m->inputs_ready), "wait for routed inputs", err) < 0)
        return -1;
    const uint64_t t0 = guild_now_ns();
    if (moe_exec_run(m->exec, m->layer, m->n, m->h_x, m->h_ids, m->h_y, err) < 0)
        return -1;
    m->stats.exchanges++;
    m->stats.wait_ns += guild_now_ns() - t0;
    const size_t bytes = (size_t)m->n * (size_t)m->n_used * (size_t)m->n_embd * sizeof(float);
    if (cuda_check(cudaMemcpyAsync(m->d_y, m->h_y, bytes, cudaMemcpyHostToDevice, s), "copy expert outputs", err) < 0)
        return -1;
    /* h_y is rewritten by the next collect only after that layer's inputs are ready, i.e. after this copy
     * (same stream, earlier), so no extra wait is needed here. */
    *y = m->d_y;
    return 0;
}

static void local_destroy(cuda_moe_t *base)
{
    moe_local_t *m = (moe_local_t *)base;
    if (m->inputs_ready)
        cudaEventDestroy(m->inputs_ready);
    cudaFreeHost(m->h_x);
    cudaFreeHost(m->h_ids);
    cudaFreeHost(m->h_y);
    cuda_free((void **)&m->d_y);
    free(m);
}

static void local_stats(const cuda_moe_t *base, cuda_moe_stats_t *out)
{
    *out = ((const moe_local_t *)base)->stats;
}

static const cuda_moe_ops_t local_ops = {
    .name = "local",
    .submit = local_submit,
    .collect = local_collect,
    .destroy = local_destroy,
    .stats = local_stats,
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

int cuda_moe_local_new(cuda_moe_t **out, moe_exec_t *exec, int32_t max_tokens, int32_t n_embd, int32_t n_used,
                       guild_err_t *err)
{
    *out = NULL;
    moe_local_t *m = calloc(1, sizeof *m);
    if (!m)
        return guild_err_set(err, "cuda moe: out of memory");
    m->base.ops = &local_ops;
    m->exec = exec;
    m->max_tokens = max_tokens;
    m->n_embd = n_embd;
    m->n_used = n_used;
    const size_t T = (size_t)max_tokens, E = (size_t)n_embd, K = (size_t)n_used;
    if (pinned((void **)&m->h_x, T * E * sizeof(float), err) < 0 ||
        pinned((void **)&m->h_ids, T * K * sizeof(int32_t), err) < 0 ||
        pinned((void **)&m->h_y, T * K * E * sizeof(float), err) < 0 ||
        cuda_alloc((void **)&m->d_y, T * K * E * sizeof(float), NULL, "routed expert outputs", err) < 0 ||
        cuda_check(cudaEventCreateWithFlags(&m->inputs_ready, cudaEventDisableTiming), "create event", err) < 0) {
        local_destroy(&m->base);
        return -1;
    }
    *out = &m->base;
    return 0;
}
