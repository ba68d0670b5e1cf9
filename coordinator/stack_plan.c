/* The stack's GPU memory plan (contract in stack_plan.h). */
#include "coordinator/stack_plan.h"

#include <stdio.h>
#include <string.h>

/* How streamed experts reach the device under o's stager. */
static gpu_copy_path_t copy_path(const stack_options_t *o)
{
    const cuda_stager_t st = o->gpu.cuda.stager;
    /* shared: DMA from the CPU side's own copies, registered: the pinned rate */
    return st == CUDA_STAGER_PIN || st == CUDA_STAGER_SHARED ? GPU_COPY_PINNED
           : st == CUDA_STAGER_NONE                         ? GPU_COPY_PAGEABLE
                                                            : GPU_COPY_RING;
}

int stack_plan_make(stack_plan_t *sp, const stack_options_t *o, const model_t *m, guild_err_t *err)
{
    memset(sp, 0, sizeof *sp);
    const model_config_t *c = model_config(m);
    const char *backend = o->gpu.backend ? o->gpu.backend : "cpu";
    const int caps = backend_plan_caps(backend);
    const bool cuda = !strcmp(backend, "cuda");
    /* cuda plans its device; the cpu backend stands in for a device only when given a budget */
    sp->on = cuda || (caps > 0 && o->gpu.cuda.gpu_mem > 0);
    if (!sp->on) {
        sp->n_batch = o->n_batch > 0 ? o->n_batch : STACK_BATCH_DEFAULT;
        if (o->n_ctx > 0 && sp->n_batch > o->n_ctx)
            sp->n_batch = o->n_ctx;
        return 0;
    }
    if (o->routing_path[0]) {
        if (routing_profile_load(&sp->routing, o->routing_path, err) < 0 ||
            routing_profile_check(sp->routing, c, o->routing_path, err) < 0) {
            routing_profile_destroy(&sp->routing);
            return guild_err_prefix(err, "routing profile (--no-tuning ignores it): ");
        }
    }
    const gpu_copy_path_t path = copy_path(o);
    gpu_cost_t cost;
    gpu_cost_default(&cost, path);
    gpu_cost_measured(&cost, path, o->cost.h2d_gbps, o->cost.gpu_tflops, o->cost.cpu_tflops, o->cost.cpu_gbps,
                      o->cost.source[0] ? o->cost.source : NULL);
    const gpu_plan_options_t po = {
        .budget = o->gpu.cuda.gpu_mem,
        .n_ctx = o->n_ctx,
        .n_seq = o->n_seq,
        .n_batch = o->n_batch > 0 ? o->n_batch : GPU_PLAN_BATCH_AUTO,
        .n_batch_min = 1,
        .kv_type = o->gpu.kv_type,
        .max_expert_layers = o->gpu.cuda.gpu_expert_layers,
        .caps = caps > 0 ? (unsigned)caps : 0,
        .cost = &cost,
        .copy_path = path,
        .routing = sp->routing ? sp->routing->count : NULL,
        .routing_name = sp->routing ? o->routing_path : NULL,
        .mtp = o->gpu.mtp,
        .rollback = o->gpu.rollback,
    };
    if (gpu_plan_compute(&sp->gpu, m, &po, err) < 0) {
        routing_profile_destroy(&sp->routing);
        sp->on = false;
        return -1;
    }
    sp->n_batch = sp->gpu.n_batch;
    return 0;
}

/* Whether --gpu-mem auto has a budget to decide: the cuda backend, no --gpu-mem given. */
static bool auto_decides(const stack_options_t *o)
{
    return o->gpu.backend && !strcmp(o->gpu.backend, "cuda") && !o->gpu.cuda.gpu_mem;
}

int stack_plan_fit_to(stack_options_t *o, const model_t *m, const backend_device_mem_t *dev, guild_err_t *err)
{
    o->gpu_mem_why[0] = '\0';
    if (!auto_decides(o) || !dev->total)
        return 0;
    const double GiB = 1073741824.0;
    /* what this process may take: the device, less what other processes hold when its free memory was asked (that
     * free memory was seen by a context of the asker's own, which the plan counts apart as GPU_PLAN_CONTEXT) */
    uint64_t usable = dev->total;
    if (dev->free && dev->free + GPU_PLAN_CONTEXT < dev->total)
        usable = dev->free + GPU_PLAN_CONTEXT;
    char device[112];
    if (usable < dev->total)
        snprintf(device, sizeof device, "the %.2f GiB of the device's %.2f GiB that other processes leave",
                 (double)usable / GiB, (double)dev->total / GiB);
    else
        snprintf(device, sizeof device, "the device's %.2f GiB", (double)dev->total / GiB);
    char asked[200] = "";
    if (!dev->free && dev->why[0])
        snprintf(asked, sizeof asked, " (its free memory not asked: %s)", dev->why);
    stack_plan_t sp;
    if (stack_plan_make(&sp, o, m, err) < 0)
        return -1;
    /* the whole plan with what a budget's plan counts beside it: the context and the driver's share */
    const uint64_t need = gpu_plan_total(&sp.gpu) + GPU_PLAN_CONTEXT +
                          gpu_plan_driver_bytes(m, o->n_ctx, o->n_seq, o->gpu.kv_type, copy_path(o));
    stack_plan_fini(&sp);
    if (need <= usable) {
        snprintf(o->gpu_mem_why, sizeof o->gpu_mem_why, "auto: no budget, the whole model fits %s (%.2f GiB)%s",
                 device, (double)need / GiB, asked);
        return 0;
    }
    o->gpu.cuda.gpu_mem = usable;
    snprintf(o->gpu_mem_why, sizeof o->gpu_mem_why, "auto: %s; the whole model would take %.2f GiB%s", device,
             (double)need / GiB, asked);
    /* a budget too small for the dense part: say that auto chose it, and from what */
    if (stack_plan_make(&sp, o, m, err) < 0) {
        o->gpu.cuda.gpu_mem = 0;
        return guild_err_prefix(err, "--gpu-mem %s: ", o->gpu_mem_why);
    }
    stack_plan_fini(&sp);
    return 0;
}

int stack_plan_fit(stack_options_t *o, const model_t *m, guild_err_t *err)
{
    backend_device_mem_t dev = {0};
    if (auto_decides(o))
        backend_device_memory(o->gpu.backend, &dev); /* asked only when auto decides: it makes a context */
    return stack_plan_fit_to(o, m, &dev, err);
}

void stack_plan_fini(stack_plan_t *sp)
{
    if (sp->on)
        gpu_plan_fini(&sp->gpu);
    routing_profile_destroy(&sp->routing);
    sp->on = false;
}

const uint8_t *stack_plan_gpu_experts(const stack_plan_t *sp)
{
    return sp->on && sp->gpu.n_resident_experts ? sp->gpu.expert_resident : NULL;
}

double stack_plan_hit_rate(const stack_plan_t *sp, const uint64_t *counts)
{
    if (!sp->on || !counts)
        return -1;
    const size_t n = (size_t)sp->gpu.n_layer * (size_t)sp->gpu.n_expert;
    uint64_t all = 0, hit = 0;
    for (size_t i = 0; i < n; i++) {
        all += counts[i];
        hit += sp->gpu.expert_resident[i] ? counts[i] : 0;
    }
    return all ? (double)hit / (double)all : -1;
}
