/* guild-stage-cuda-bench — host-to-device rates for a model's expert tensors, layer by layer: straight from the
 * pageable mapping (today's path), through a pinned staging ring filled by an in-process stager
 * (cuda_stage), and the ceiling of the ring's pinned memory alone. Built with the CUDA backend; runs on a
 * machine with a GPU. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/gguf/gguf.h"
#include "core/util/cli.h"
#include "core/util/log.h"
#include "gpu-worker/dense/cuda/cuda_stage.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "ipc/doorbell.h"
#include "ipc/stage_ring.h"
#include "ipc/stage_server.h"

#define MAX_LAYERS 512
#define MAX_PER_LAYER 8

typedef struct layer_pieces {
    cuda_stage_piece_t p[MAX_PER_LAYER]; /* the layer's *_exps tensors, end to end at the destination */
    int32_t n;
    size_t bytes;
} layer_pieces_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One pass: every layer copied to the same device buffer, in order, on one stream. Returns seconds or -1. */
static double pass(cuda_stage_t *st, const layer_pieces_t *L, int n_layers, char *d, cudaStream_t s,
                   guild_err_t *err)
{
    uint64_t t0 = guild_now_ns();
    for (int l = 0; l < n_layers; l++)
        if (L[l].n && cuda_stage_copy(st, d, L[l].p, L[l].n, s, err) < 0)
            return -1;
    if (cuda_check(cudaStreamSynchronize(s), "sync", err) < 0)
        return -1;
    return (double)(guild_now_ns() - t0) * 1e-9;
}

static int run(const char *model, int threads, int runs, size_t slot_bytes, guild_err_t *err)
{
    int rc = -1;
    gguf_t *g = NULL;
    layer_pieces_t *L = calloc(MAX_LAYERS, sizeof *L);
    double *secs = calloc((size_t)runs, sizeof *secs);
    char *d = NULL;
    cudaStream_t s = NULL;
    cuda_stage_t *st = NULL;
    stage_ring_t *ring = NULL;
    stage_server_t *server = NULL;
    if (!L || !secs) {
        guild_err_set(err, "out of memory");
        goto out;
    }
    if (gguf_new(&g, model, err) < 0)
        goto out;
    const char *base = NULL;
    int n_layers = 0;
    size_t max_layer = 0, total = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        int l;
        if (!strstr(t->name, "_exps") || sscanf(t->name, "blk.%d.", &l) != 1 || l < 0 || l >= MAX_LAYERS ||
            L[l].n == MAX_PER_LAYER)
            continue;
        base = (const char *)t->data - t->offset;
        L[l].p[L[l].n++] = (cuda_stage_piece_t){t->data, (size_t)t->size, L[l].bytes};
        L[l].bytes += (size_t)t->size;
        total += (size_t)t->size;
        if (L[l].bytes > max_layer)
            max_layer = L[l].bytes;
        if (l + 1 > n_layers)
            n_layers = l + 1;
    }
    if (!n_layers) {
        guild_err_set(err, "%s: no routed-expert tensors (blk.N.*_exps)", model);
        goto out;
    }
    if (cuda_check(cudaMalloc((void **)&d, max_layer), "device buffer", err) < 0 ||
        cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream", err) < 0)
        goto out;
    printf("# model=%s layers=%d expert_bytes=%zu largest_layer=%zu threads=%d slot=%zuMiB runs=%d\n", model,
           n_layers, total, max_layer, threads, slot_bytes >> 20, runs);

    /* today's path: pageable */
    if (cuda_stage_new_pageable(&st, err) < 0 || pass(st, L, n_layers, d, s, err) < 0)
        goto out;
    for (int r = 0; r < runs; r++)
        if ((secs[r] = pass(st, L, n_layers, d, s, err)) < 0)
            goto out;
    printf("stager cuda: mode=pageable median_GBps=%.2f\n", (double)total / median(secs, runs) / 1e9);
    cuda_stage_destroy(&st);

    /* the ring, filled by an in-process stager */
    if (stage_ring_create(&ring, 3, slot_bytes, NULL, err) < 0 ||
        stage_server_start(&server, ring, base, (size_t)gguf_file_size(g), threads, err) < 0 ||
        cuda_stage_new_ring(&st, ring, base, (size_t)gguf_file_size(g), NULL, err) < 0 ||
        pass(st, L, n_layers, d, s, err) < 0)
        goto out;
    uint64_t wait0 = 0, wait1 = 0;
    cuda_stage_stats(st, NULL, &wait0);
    double busy = 0;
    for (int r = 0; r < runs; r++) {
        if ((secs[r] = pass(st, L, n_layers, d, s, err)) < 0)
            goto out;
        busy += secs[r];
    }
    cuda_stage_stats(st, NULL, &wait1);
    printf("stager cuda: mode=ring median_GBps=%.2f fill_wait_fraction=%.2f\n",
           (double)total / median(secs, runs) / 1e9, (double)(wait1 - wait0) * 1e-9 / busy);
    cuda_stage_destroy(&st);
    stage_server_stop(&server);

    /* the ceiling: the ring's registered memory to the device, no stager */
    if (cuda_check(cudaHostRegister(stage_ring_map_base(ring), stage_ring_map_size(ring), cudaHostRegisterPortable),
                   "register the ring", err) < 0)
        goto out;
    size_t chunk = slot_bytes < max_layer ? slot_bytes : max_layer;
    for (int r = 0; r < runs; r++) {
        uint64_t t0 = guild_now_ns();
        for (size_t done = 0; done < total; done += chunk)
            if (cuda_check(cudaMemcpyAsync(d, stage_ring_slot(ring, (uint32_t)(done / chunk % 3)), chunk,
                                           cudaMemcpyHostToDevice, s), "pinned copy", err) < 0)
                break;
        if (cuda_check(cudaStreamSynchronize(s), "sync", err) < 0)
            break;
        secs[r] = (double)(guild_now_ns() - t0) * 1e-9;
    }
    cudaHostUnregister(stage_ring_map_base(ring));
    if (err->msg[0])
        goto out;
    printf("stager cuda: mode=pinned_ceiling median_GBps=%.2f\n",
           (double)((total + chunk - 1) / chunk * chunk) / median(secs, runs) / 1e9);
    rc = 0;
out:
    cuda_stage_destroy(&st);
    stage_server_stop(&server);
    stage_ring_destroy(&ring);
    if (s)
        cudaStreamDestroy(s);
    if (d)
        cudaFree(d);
    gguf_destroy(&g);
    free(L);
    free(secs);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},   {"threads", required_argument, NULL, 't'},
        {"runs", required_argument, NULL, 'R'},    {"slot-mib", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *model = NULL;
    long threads = 4, runs = 5, slot_mib = 64;
    guild_err_t err = {{0}};
    int o;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 't':
            if (cli_parse_long("--threads", optarg, 1, 256, &threads, &err) < 0)
                goto bad;
            break;
        case 'R':
            if (cli_parse_long("--runs", optarg, 1, 1000, &runs, &err) < 0)
                goto bad;
            break;
        case 'S':
            if (cli_parse_long("--slot-mib", optarg, 1, 65536, &slot_mib, &err) < 0)
                goto bad;
            break;
        case 'h':
            printf("usage: guild-stage-cuda-bench -m MODEL [--threads K] [--runs N] [--slot-mib S]\n");
            return 0;
        default:
            fprintf(stderr, "guild-stage-cuda-bench: unknown option or missing value: %s\n", argv[optind - 1]);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "guild-stage-cuda-bench: -m MODEL is required\n");
        return 2;
    }
    guild_log_init("stager-cuda-bench", GUILD_LOG_WARN);
    if (run(model, (int)threads, (int)runs, (size_t)slot_mib << 20, &err) < 0) {
        fprintf(stderr, "guild-stage-cuda-bench: %s\n", err.msg);
        return 1;
    }
    return 0;

bad:
    fprintf(stderr, "guild-stage-cuda-bench: %s\n", err.msg);
    return 2;
}
