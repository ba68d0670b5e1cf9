/* The device-driven "xchg" executor: the routed experts of a layer go to the CPU workers through the arena's MoE
 * exchange, driven from the device (in-graph doorbells, gpu-worker/dense/cuda/cuda_xchg.h). See cuda_moe.h.
 *
 * The host's part is small: before a step it clears a previous failure and the cancel flag; while the device
 * runs it watches the step doorbell and wakes CPU workers that went to sleep on it (a kernel's store cannot make
 * the futex call), and asks interrupted() about once a millisecond, raising the cancel flag the device's waits
 * poll; after the step it reads the device counters (copied by step_end) and reports a failed exchange. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/cuda/cuda_moe.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/cuda/cuda_xchg.h"
#include "ipc/doorbell.h"
#include "ipc/exchange.h"

#define INTERRUPT_CHECK_NS 1000000u

typedef struct moe_xchg_dev {
    moe_exec_t base;
    void *reg;                     /* the registered host memory (o->map), NULL before registration */
    guild_doorbell_t *step_db;     /* the arena's step doorbell (host address) */
    uint64_t woken;                /* its value when last woken: a change since (made by the device while the host
                                    * was busy elsewhere) is woken at the next sync's start, not missed */
    cuda_xchg_view_t view;
    cuda_xchg_dev_t *d;            /* device counters */
    cuda_xchg_dev_t *mirror;       /* pinned: the counters as of the last step_end */
    unsigned *cancel;              /* pinned, mapped: the device's waits give up when nonzero */
    float *y;                      /* device [max_tokens][n_used][n_embd] */
    int32_t max_tokens, n_embd, n_used;
    int32_t layer, n;              /* of the exchange in flight */
    int32_t n_prefetch;            /* predicted experts per token a hint carries (the exchange's; 0: no hints) */
    uint64_t router_pubs, in_place; /* exchanges the router's launch published, collects without the copy
                                     * (enqueued: a graph's once, when captured) */
    int (*interrupted)(void *ctx, guild_err_t *err);
    void *ctx;
    char cancel_msg[GUILD_ERR_MAX]; /* why the host cancelled */
} moe_xchg_dev_t;

static const moe_exec_ops_t xchg_ops;

static int xchg_submit(moe_exec_t *base, int32_t layer, int32_t n, const float *x, const int32_t *ids, void *queue,
                       guild_err_t *err)
{
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    cudaStream_t s = queue;
    if (n < 1 || n > m->max_tokens)
        return guild_err_set(err, "cuda moe: %d tokens in an exchange (1..%d)", n, m->max_tokens);
    m->layer = layer;
    m->n = n;
    return cuda_xchg_publish(&m->view, m->d, layer, n, m->n_embd, m->n_used, x, ids, s, err);
}

static int xchg_collect(moe_exec_t *base, const float **y, void *queue, guild_err_t *err)
{
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    cudaStream_t s = queue;
    const int64_t n = (int64_t)m->n * m->n_used * m->n_embd;
    if (cuda_xchg_wait(&m->view, m->d, m->layer, s, err) < 0 || cuda_xchg_take_y(&m->view, m->d, n, m->y, s, err) < 0)
        return -1;
    *y = m->y;
    return 0;
}

bool cuda_moe_pub_of(moe_exec_t *base, int32_t layer, int32_t n, cuda_xchg_pub_t *pub)
{
    if (base->ops != &xchg_ops || n != 1)
        return false;
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    *pub = (cuda_xchg_pub_t){.view = m->view, .d = m->d, .layer = layer};
    return true;
}

void cuda_moe_published(moe_exec_t *base, int32_t layer, int32_t n)
{
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    m->layer = layer;
    m->n = n;
    m->router_pubs++;
}

void cuda_moe_xchg_fused(const moe_exec_t *base, uint64_t *router_pubs, uint64_t *in_place)
{
    const moe_xchg_dev_t *m = (const moe_xchg_dev_t *)base;
    const bool x = base->ops == &xchg_ops;
    *router_pubs = x ? m->router_pubs : 0;
    *in_place = x ? m->in_place : 0;
}

int cuda_moe_collect_at(moe_exec_t *base, const float *const **y_at, cudaStream_t s, guild_err_t *err)
{
    *y_at = NULL;
    if (base->ops != &xchg_ops)
        return 0;
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    if (cuda_xchg_wait(&m->view, m->d, m->layer, s, err) < 0)
        return -1;
    *y_at = &m->d->y;
    m->in_place++;
    return 1;
}

static int xchg_collect_rows(moe_exec_t *base, float *y, const int32_t *ids, void *queue, guild_err_t *err)
{
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    cudaStream_t s = queue;
    if (cuda_xchg_wait(&m->view, m->d, m->layer, s, err) < 0 ||
        cuda_xchg_take_y_rows(&m->view, m->d, ids, m->n * m->n_used, m->n_embd, y, s, err) < 0)
        return -1;
    return 0;
}

static int32_t xchg_hint_experts(const moe_exec_t *base)
{
    return ((const moe_xchg_dev_t *)base)->n_prefetch;
}

static int xchg_hint(moe_exec_t *base, int32_t layer, int32_t n, const int32_t *ids, void *queue, guild_err_t *err)
{
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    if (m->n_prefetch <= 0)
        return 0;
    return cuda_xchg_hint(&m->view, m->d, layer, n, m->n_used, guild_exchange_hint_per(n, m->n_prefetch), ids,
                          (cudaStream_t)queue, err);
}

static bool xchg_capturable(const moe_exec_t *base)
{
    (void)base;
    return true;
}

static int xchg_step_begin(moe_exec_t *base, void *queue, guild_err_t *err)
{
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    cudaStream_t s = queue;
    *(volatile unsigned *)m->cancel = 0;
    m->cancel_msg[0] = '\0';
    if (m->mirror->failed) {
        m->mirror->failed = 0;
        return cuda_check(cudaMemsetAsync(&m->d->failed, 0, sizeof m->d->failed, s), "clear the exchange failure",
                          err);
    }
    return 0;
}

static int xchg_step_end(moe_exec_t *base, void *queue, guild_err_t *err)
{
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    cudaStream_t s = queue;
    return cuda_check(cudaMemcpyAsync(m->mirror, m->d, sizeof *m->d, cudaMemcpyDeviceToHost, s),
                      "copy the exchange counters", err);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int xchg_sync(moe_exec_t *base, void *done_event, guild_err_t *err)
{
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    cudaEvent_t done = done_event;
    uint64_t seen = m->woken;
    uint64_t next_check = guild_now_ns() + INTERRUPT_CHECK_NS;
    for (;;) {
        const cudaError_t e = cudaEventQuery(done);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_check(e, "forward pass", err);
        const uint64_t v = guild_doorbell_load(m->step_db);
        if (v != seen) {
            seen = m->woken = v;
            guild_doorbell_wake(m->step_db);
        }
        if (m->interrupted && !m->cancel_msg[0]) {
            const uint64_t now = guild_now_ns();
            if (now >= next_check) {
                guild_err_t why = {{0}};
                if (m->interrupted(m->ctx, &why)) {
                    snprintf(m->cancel_msg, sizeof m->cancel_msg, "%s", why.msg[0] ? why.msg : "interrupted");
                    *(volatile unsigned *)m->cancel = 1;
                }
                next_check = now + INTERRUPT_CHECK_NS;
            }
        }
        for (int i = 0; i < 16; i++)
            cpu_relax();
    }
}

static int xchg_result(moe_exec_t *base, guild_err_t *err)
{
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    const cuda_xchg_dev_t *c = m->mirror;
    if (c->failed == CUDA_XCHG_OK)
        return 0;
    if (c->failed == CUDA_XCHG_CANCELLED)
        return guild_err_set(err, "layer %d: exchange %llu: %s", c->fail_layer, (unsigned long long)c->fail_seq,
                             m->cancel_msg[0] ? m->cancel_msg : "the device's wait was cancelled");
    return guild_err_set(err, "layer %d: the CPU workers did not complete exchange %llu within %.0f ms (device wait)",
                         c->fail_layer, (unsigned long long)c->fail_seq, (double)m->view.timeout_ns / 1e6);
}

static void xchg_stats(const moe_exec_t *base, moe_exec_stats_t *out)
{
    const moe_xchg_dev_t *m = (const moe_xchg_dev_t *)base;
    out->exchanges = m->mirror->exchanges;
    out->wait_ns = m->mirror->wait_ns;
}

static void xchg_destroy(moe_exec_t *base)
{
    moe_xchg_dev_t *m = (moe_xchg_dev_t *)base;
    cuda_free((void **)&m->d);
    cuda_free((void **)&m->y);
    if (m->mirror)
        cudaFreeHost(m->mirror);
    if (m->cancel)
        cudaFreeHost(m->cancel);
    if (m->reg)
        cudaHostUnregister(m->reg);
    free(m);
}

static const moe_exec_ops_t xchg_ops = {
    .name = "xchg",
    .mem = MOE_EXEC_DEVICE,
    .submit = xchg_submit,
    .collect = xchg_collect,
    .destroy = xchg_destroy,
    .stats = xchg_stats,
    .capturable = xchg_capturable,
    .step_begin = xchg_step_begin,
    .step_end = xchg_step_end,
    .sync = xchg_sync,
    .result = xchg_result,
    .collect_rows = xchg_collect_rows,
    .hint_experts = xchg_hint_experts,
    .hint = xchg_hint,
};

int cuda_moe_xchg_new(moe_exec_t **out, struct guild_exchange *x, const moe_xchg_options_t *o, guild_err_t *err)
{
    *out = NULL;
    const guild_exchange_shape_t *shape = guild_exchange_shape(x);
    const char *xbase = guild_exchange_base(x);
    if (!o->map || xbase < (const char *)o->map ||
        xbase + guild_exchange_layout(x)->total > (const char *)o->map + o->map_bytes)
        return guild_err_set(err, "cuda moe: the exchange does not lie in the memory to register");
    if (cuda_check(cudaSetDevice(0), "select device 0", err) < 0)
        return -1;
    moe_xchg_dev_t *m = calloc(1, sizeof *m);
    if (!m)
        return guild_err_set(err, "cuda moe: out of memory");
    m->base.ops = &xchg_ops;
    m->max_tokens = (int32_t)shape->max_tokens;
    m->n_embd = (int32_t)shape->n_embd;
    m->n_used = (int32_t)shape->n_used;
    m->n_prefetch = (int32_t)(shape->n_prefetch < shape->n_used ? shape->n_prefetch : shape->n_used);
    m->interrupted = o->interrupted;
    m->ctx = o->ctx;
    m->step_db = guild_exchange_step_doorbell(x);
    m->woken = guild_doorbell_load(m->step_db);
    void *dev = NULL, *dcancel = NULL;
    if (cuda_check(cudaHostRegister(o->map, o->map_bytes, cudaHostRegisterMapped | cudaHostRegisterPortable),
                   "register the arena for the device", err) < 0)
        goto fail;
    m->reg = o->map;
    if (cuda_check(cudaHostGetDevicePointer(&dev, o->map, 0), "map the arena for the device", err) < 0)
        goto fail;
    /* the region's device address; the kernels place everything from it by the layout the host uses */
    m->view.base = (char *)dev + (xbase - (const char *)o->map);
    m->view.layout = *guild_exchange_layout(x);
    m->view.n_workers = (int32_t)shape->n_workers;
    m->view.max_tokens = (int32_t)shape->max_tokens;
    m->view.timeout_ns = o->timeout_ns ? o->timeout_ns : 120000000000ull;
    if (cudaHostAlloc((void **)&m->cancel, 64, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
        m->cancel = NULL;
        (void)cudaGetLastError();
        guild_err_set(err, "cuda moe: cannot allocate mapped host memory");
        goto fail;
    }
    memset(m->cancel, 0, 64);
    if (cuda_check(cudaHostGetDevicePointer(&dcancel, m->cancel, 0), "map the cancel flag", err) < 0)
        goto fail;
    m->view.cancel = dcancel;
    if (cudaMallocHost((void **)&m->mirror, sizeof *m->mirror) != cudaSuccess) {
        m->mirror = NULL;
        (void)cudaGetLastError();
        guild_err_set(err, "cuda moe: cannot allocate pinned host memory");
        goto fail;
    }
    memset(m->mirror, 0, sizeof *m->mirror);
    m->mirror->seq = guild_exchange_step(x); /* the device continues after the last exchange published */
    m->mirror->y = (const float *)(m->view.base + guild_exchange_slot_at(&m->view.layout, 0) + m->view.layout.y_off);
    const size_t ybytes = (size_t)m->max_tokens * (size_t)m->n_used * (size_t)m->n_embd * sizeof(float);
    if (cuda_alloc((void **)&m->d, sizeof *m->d, NULL, "exchange counters", err) < 0 ||
        cuda_alloc((void **)&m->y, ybytes, NULL, "routed expert outputs", err) < 0 ||
        cuda_check(cudaMemcpy(m->d, m->mirror, sizeof *m->d, cudaMemcpyHostToDevice), "set the exchange counters",
                   err) < 0)
        goto fail;
    *out = &m->base;
    return 0;
fail:
    xchg_destroy(&m->base);
    return -1;
}
