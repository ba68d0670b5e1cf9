/* The CUDA timing programs' shared parts (cuda_time.h). */
#include "tests/cuda/cuda_time.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/clock.h" /* guild_median */
#include "gpu-worker/dense/cuda/cuda_util.h"

static const char *prog = "cuda_time";
static cuda_time_cold_t cold; /* cuda_time_set_cold */

void cuda_time_set_cold(cuda_time_cold_t mode)
{
    cuda_time_need(mode != COLD_EVICT_L2 || cuda_time_cold_l2_alloc() == 0,
                   "no buffer of twice L2's size for --cold-l2 (out of device memory?)");
    cold = mode;
}

bool cuda_time_cold_arg(const char *arg)
{
    static const struct {
        const char *flag;
        cuda_time_cold_t mode;
    } flags[] = {{"--cold", COLD_EVICT}, {"--cold-l2", COLD_EVICT_L2}, {"--warm", COLD_WARM}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(arg, flags[i].flag)) {
            cuda_time_set_cold(flags[i].mode);
            return true;
        }
    return false;
}

void cuda_time_init(const char *program)
{
    prog = program;
    char why[256];
    if (cuda_device_count(why, sizeof why) < 1) {
        printf("no CUDA device (%s)\n", why);
        exit(77);
    }
}

void cuda_time_need(bool ok, const char *fmt, ...)
{
    if (ok)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* The events' span over n launches of L layers, in us a layer. */
static double span_us(cudaEvent_t e0, cudaEvent_t e1, int n, int32_t L)
{
    float ms = 0;
    CUDA_TIME_CU(cudaEventSynchronize(e1));
    CUDA_TIME_CU(cudaEventElapsedTime(&ms, e0, e1));
    return (double)ms * 1e3 / ((double)n * L);
}

/* The graph's time (us a layer) of fn's layers, each after the cold code where set (fn NULL: the cold code alone). */
static double graph_us(cuda_time_layer_fn fn, void *ctx, int32_t L, int timings, int reps, cudaStream_t s)
{
    guild_err_t err = {{0}};
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    int rc = 0;
    cuda_time_need(timings >= 1 && timings <= 64 && reps >= 1, "%d timings of %d replays", timings, reps);
    CUDA_TIME_CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int32_t l = 0; l < L && rc == 0; l++) {
        if (cold != COLD_NONE && cuda_time_cold_code(s, cold != COLD_WARM, cold == COLD_EVICT_L2) < 0) {
            rc = guild_err_set(&err, "the cold code's launch failed");
            break;
        }
        if (fn)
            rc = fn(ctx, l, &err);
    }
    CUDA_TIME_CU(cudaStreamEndCapture(s, &g));
    cuda_time_need(rc == 0, "%s", err.msg);
    CUDA_TIME_CU(cudaGraphInstantiate(&ge, g, 0));
    CUDA_TIME_CU(cudaGraphLaunch(ge, s)); /* warm */
    cudaEvent_t e0, e1;
    CUDA_TIME_CU(cudaEventCreate(&e0));
    CUDA_TIME_CU(cudaEventCreate(&e1));
    double us[64];
    for (int k = 0; k < timings; k++) {
        CUDA_TIME_CU(cudaEventRecord(e0, s));
        for (int rp = 0; rp < reps; rp++)
            CUDA_TIME_CU(cudaGraphLaunch(ge, s));
        CUDA_TIME_CU(cudaEventRecord(e1, s));
        us[k] = span_us(e0, e1, reps, L);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return guild_median(us, timings);
}

double cuda_time_graph(cuda_time_layer_fn fn, void *ctx, int32_t L, int timings, int reps, cudaStream_t s)
{
    const double us = graph_us(fn, ctx, L, timings, reps, s);
    return cold != COLD_NONE ? us - graph_us(NULL, NULL, L, timings, reps, s) : us;
}

double cuda_time_host(cuda_time_layer_fn fn, void *ctx, int32_t L, int reps, cudaStream_t s)
{
    guild_err_t err = {{0}};
    cudaEvent_t e0, e1;
    int rc = 0;
    CUDA_TIME_CU(cudaEventCreate(&e0));
    CUDA_TIME_CU(cudaEventCreate(&e1));
    for (int pass = 0; pass < 2; pass++) { /* a warm pass, then the timed one */
        if (pass)
            CUDA_TIME_CU(cudaEventRecord(e0, s));
        for (int rp = 0; rp < (pass ? reps : 1); rp++)
            for (int32_t l = 0; l < L && rc == 0; l++)
                rc = fn(ctx, l, &err);
    }
    cuda_time_need(rc == 0, "%s", err.msg);
    CUDA_TIME_CU(cudaEventRecord(e1, s));
    const double us = span_us(e0, e1, reps, L);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return us;
}
