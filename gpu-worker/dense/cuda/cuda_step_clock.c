/* The CUDA backend's step clock (contract in cuda_step_clock.h). */
#define GUILD_CUDA_STEP_CLOCK_INTERNAL
#include "gpu-worker/dense/cuda/cuda_step_clock.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/clock.h"
#include "gpu-worker/dense/cuda/cuda_backend.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_state.h"
#include "gpu-worker/dense/cuda/cuda_util.h"

int cuda_step_clock_new(cuda_step_clock_t **out, guild_err_t *err)
{
    cuda_step_clock_t *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c || !(c->rec = calloc(CUDA_CLOCK_KEEP, sizeof *c->rec))) {
        free(c);
        return guild_err_set(err, "cuda backend: out of memory for the step clock");
    }
    if (cuda_check(cudaHostAlloc((void **)&c->h_marks, CUDA_MARKS * sizeof *c->h_marks, cudaHostAllocMapped),
                   "the step clock's marks", err) < 0 ||
        cuda_check(cudaHostGetDevicePointer((void **)&c->d_marks, c->h_marks, 0), "the step clock's marks", err) < 0 ||
        cuda_check(cudaEventCreate(&c->ev[0]), "the step clock's events", err) < 0 ||
        cuda_check(cudaEventCreate(&c->ev[1]), "the step clock's events", err) < 0) {
        (void)cudaGetLastError();
        cuda_step_clock_destroy(&c);
        return -1;
    }
    memset(c->h_marks, 0, CUDA_MARKS * sizeof *c->h_marks);
    *out = c;
    return 0;
}

void cuda_step_clock_destroy(cuda_step_clock_t **cp)
{
    cuda_step_clock_t *c = *cp;
    if (!c)
        return;
    for (int i = 0; i < 2; i++)
        if (c->ev[i])
            cudaEventDestroy(c->ev[i]);
    if (c->h_marks)
        cudaFreeHost(c->h_marks);
    free(c->rec);
    free(c);
    *cp = NULL;
}

void cuda_step_clock_host(cuda_step_clock_t *c, int which)
{
    if (!c)
        return;
    c->host[which] = guild_clock_s();
    if (which == CUDA_HOST_ENTER) { /* a pass whose marks do not run leaves them 0: unknown */
        memset(c->h_marks, 0, CUDA_MARKS * sizeof *c->h_marks);
        c->host[CUDA_HOST_LAUNCH] = c->host[CUDA_HOST_LAUNCHED] = c->host[CUDA_HOST_SYNCED] = c->host[which];
    }
}

int cuda_step_clock_mark(cuda_step_clock_t *c, int which, cudaStream_t s, guild_err_t *err)
{
    return c ? cuda_clock_mark(c->d_marks + which, s, err) : 0;
}

int cuda_step_clock_event(cuda_step_clock_t *c, int which, cudaStream_t s, guild_err_t *err)
{
    return c ? cuda_check(cudaEventRecord(c->ev[which], s), "the step clock's event", err) : 0;
}

void cuda_step_clock_done(cuda_step_clock_t *c, int32_t rows, bool graph)
{
    if (!c)
        return;
    cuda_step_times_t *t = &c->rec[c->n_rec++ % CUDA_CLOCK_KEEP];
    memset(t, 0, sizeof *t);
    t->rows = rows;
    t->graph = graph;
    for (int i = 0; i + 1 < CUDA_HOSTS; i++)
        t->host[i] = (c->host[i + 1] - c->host[i]) * 1e6;
    t->wall = (c->host[CUDA_HOST_EXIT] - c->host[CUDA_HOST_ENTER]) * 1e6;
    float ms = 0;
    t->gpu = cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]) == cudaSuccess ? (double)ms * 1e3 : -1;
    (void)cudaGetLastError();
    const volatile uint64_t *m = c->h_marks; /* written by the device; the step has synchronised */
    uint64_t prev = m[0]; /* the latest mark that ran (a part without its own marks leaves them 0) */
    for (int i = 0; i + 1 < CUDA_MARKS; i++) {
        const uint64_t x = m[i + 1];
        t->mark[i] = prev && x && x >= prev ? (double)(x - prev) / 1e3 : -1;
        if (x)
            prev = x;
    }
}

int cuda_backend_step_times(struct backend *be, cuda_step_times_t *out, int32_t cap, int32_t *n, guild_err_t *err)
{
    *n = 0;
    if (!be || be->ops != &cuda_backend_ops)
        return guild_err_set(err, "the step clock: not the cuda backend");
    cuda_backend_t *b = (cuda_backend_t *)be;
    cuda_step_clock_t *c = b->clock;
    if (!c)
        return guild_err_set(err, "the step clock is off (cuda_config_t.step_clock)");
    const int64_t have = c->n_rec < CUDA_CLOCK_KEEP ? c->n_rec : CUDA_CLOCK_KEEP;
    const int64_t k = have < cap ? have : cap;
    for (int64_t i = 0; i < k; i++) /* the latest k, oldest first */
        out[i] = c->rec[(c->n_rec - k + i) % CUDA_CLOCK_KEEP];
    c->n_rec = 0;
    *n = (int32_t)k;
    return 0;
}

/* The median of the known (>= 0) values of field f over t[0..n); -1 when none is known. */
static double median_of(const cuda_step_times_t *t, int32_t n, size_t off, double *v)
{
    int k = 0;
    for (int32_t i = 0; i < n; i++) {
        const double x = *(const double *)((const char *)&t[i] + off);
        if (x >= 0)
            v[k++] = x;
    }
    return k ? guild_median(v, k) : -1;
}

void cuda_step_times_print(const cuda_step_times_t *t, int32_t n, FILE *out)
{
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v || n < 1) {
        fprintf(out, "step clock: no passes recorded\n");
        free(v);
        return;
    }
    int32_t graphs = 0;
    for (int32_t i = 0; i < n; i++)
        graphs += t[i].graph;
    static const char *const hn[] = {"host: entry -> launch (graph lookup, executor's step begin)",
                                     "host: the launch call (cudaGraphLaunch, or the direct enqueue)",
                                     "host: launched -> synchronised (waiting for the device)",
                                     "host: synchronised -> return (logits to the caller)"};
    static const char *const mn[] = {"device: start -> embedding done (tokens' copy, get_rows, finite reset)",
                                     "device: -> layer 0's block norm done",
                                     "device:    -> its Q/K/V products done (GQA)",
                                     "device:    -> its qk_prepare done (Q/K norms, RoPE, K/V store)",
                                     "device:    -> its attention kernel done (merge, quantization)",
                                     "device: -> layer 0's attention part done (output product)",
                                     "device: -> layer 0's FFN norm done",
                                     "device:    -> its router done (MoE: product, choice, counts)",
                                     "device: -> layer 0's FFN part done (layer 0 done)",
                                     "device: -> last layer done", "device: -> LM head's product done"};
    _Static_assert(sizeof mn / sizeof mn[0] == CUDA_MARKS - 1, "a name a span");
    fprintf(out, "step clock over %d forward passes (%d replayed graphs), medians in us:\n", n, graphs);
    fprintf(out, "  %-72s %9.1f\n", "host: wall (entry -> return)",
            median_of(t, n, offsetof(cuda_step_times_t, wall), v));
    for (int i = 0; i + 1 < CUDA_HOSTS; i++)
        fprintf(out, "  %-72s %9.1f\n", hn[i],
                median_of(t, n, offsetof(cuda_step_times_t, host) + (size_t)i * sizeof(double), v));
    fprintf(out, "  %-72s %9.1f\n", "device: events around the launch (stream reaches the step -> its last work)",
            median_of(t, n, offsetof(cuda_step_times_t, gpu), v));
    for (int i = 0; i + 1 < CUDA_MARKS; i++) {
        const double x = median_of(t, n, offsetof(cuda_step_times_t, mark) + (size_t)i * sizeof(double), v);
        if (x >= 0)
            fprintf(out, "  %-72s %9.1f\n", mn[i], x);
        else
            fprintf(out, "  %-72s %9s\n", mn[i], "-");
    }
    free(v);
}
