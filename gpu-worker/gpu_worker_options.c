#include "config.h"

#include "gpu-worker/gpu_worker_options.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"

/* proto3 strings are never NULL on the wire: "" stands for "not given" */
static char *wire_str(const char *s)
{
    return (char *)(s ? s : "");
}

static const char *record_str(const char *s)
{
    return s && s[0] ? s : NULL;
}

void gpu_worker_options_to_proto(const gpu_worker_options_t *o, gpu_worker_options_msg_t *msg)
{
    Guild__GpuWorkerOptions *m = &msg->m;
    Guild__CudaOptions *c = &msg->cuda;
    guild__gpu_worker_options__init(m);
    guild__cuda_options__init(c);
    m->backend = wire_str(o->backend);
    m->n_ctx = (uint32_t)o->n_ctx;
    m->n_batch = (uint32_t)o->n_batch;
    m->max_out = (uint32_t)o->max_out;
    m->n_seq = (uint32_t)o->n_seq;
    m->n_threads = (uint32_t)o->n_threads;
    m->spin_ns = o->spin_ns;
    m->wait_slice_ns = o->wait_slice_ns;
    m->silence_ms = o->silence_ms;
    c->gpu_mem = o->cuda.gpu_mem;
    c->gpu_expert_layers = o->cuda.gpu_expert_layers;
    c->no_graph = o->cuda.no_graph;
    c->no_fuse = o->cuda.no_fuse;
    c->no_pdl = o->cuda.no_pdl;
    c->stager = (uint32_t)o->cuda.stager;
    c->stage_threads = (uint32_t)o->cuda.stage_threads;
    c->stage_ring = wire_str(o->cuda.stage_ring);
    c->n_resident_layers = o->cuda.n_resident_layers;
    c->resident_layers = (uint32_t *)o->cuda.resident_layers;
    c->test_split_gpu_fraction = o->cuda.test.split_gpu_fraction;
    c->no_attn_grid = o->cuda.no_attn_grid;
    c->no_attn_early = o->cuda.no_attn_early;
    c->no_attn_prefetch = o->cuda.no_attn_prefetch;
    c->no_attn_mma = o->cuda.no_attn_mma;
    c->no_norm_cluster = o->cuda.no_norm_cluster;
    c->no_mm_split = o->cuda.no_mm_split;
    c->no_xchg_fuse = o->cuda.no_xchg_fuse;
    c->no_l2_stream = o->cuda.no_l2_stream;
    m->cuda = c;
    m->count_routing = o->count_routing;
    m->no_check_finite = !o->check_finite;
    m->kv_type = (uint32_t)o->kv_type;
    m->mtp = o->mtp;
    m->rollback = (uint32_t)o->rollback;
    guild__gpu_plan__init(&msg->plan);
    if (o->plan.given) {
        Guild__GpuPlan *p = &msg->plan;
        p->budget = o->plan.budget;
        p->n_batch = (uint32_t)o->plan.n_batch;
        p->stage_slots = (uint32_t)o->plan.stage_slots;
        p->stage_slot_experts = (uint32_t)o->plan.stage_slot_experts;
        p->expert_resident.data = (uint8_t *)o->plan.expert_resident;
        p->expert_resident.len = o->plan.n_expert_resident;
        m->plan = p;
    }
}

/* A uint32 of the wire into an int32 of the record. */
static int to_i32(uint32_t v, const char *what, int32_t *out, guild_err_t *err)
{
    if (v > INT32_MAX)
        return guild_err_set(err, "GPU worker options: %s %u is out of range", what, v);
    *out = (int32_t)v;
    return 0;
}

/* The plan's decisions and the routing counting. */
static int plan_from_proto(gpu_worker_options_t *o, const Guild__GpuWorkerOptions *m, guild_err_t *err)
{
    o->count_routing = m->count_routing;
    const Guild__GpuPlan *p = m->plan;
    if (!p)
        return 0;
    o->plan.given = true;
    o->plan.budget = p->budget;
    if (to_i32(p->n_batch, "plan n_batch", &o->plan.n_batch, err) < 0 ||
        to_i32(p->stage_slots, "plan stage_slots", &o->plan.stage_slots, err) < 0 ||
        to_i32(p->stage_slot_experts, "plan stage_slot_experts", &o->plan.stage_slot_experts, err) < 0)
        return -1;
    o->plan.expert_resident = p->expert_resident.data;
    o->plan.n_expert_resident = p->expert_resident.len;
    return 0;
}

int gpu_worker_options_from_proto(gpu_worker_options_t *o, const Guild__GpuWorkerOptions *m, guild_err_t *err)
{
    memset(o, 0, sizeof *o);
    o->backend = record_str(m->backend);
    if (to_i32(m->n_ctx, "n_ctx", &o->n_ctx, err) < 0 || to_i32(m->n_batch, "n_batch", &o->n_batch, err) < 0 ||
        to_i32(m->max_out, "max_out", &o->max_out, err) < 0 || to_i32(m->n_seq, "n_seq", &o->n_seq, err) < 0 ||
        to_i32(m->n_threads, "n_threads", &o->n_threads, err) < 0 ||
        to_i32(m->rollback, "rollback", &o->rollback, err) < 0)
        return -1;
    o->spin_ns = m->spin_ns;
    o->wait_slice_ns = m->wait_slice_ns;
    o->silence_ms = m->silence_ms;
    o->check_finite = !m->no_check_finite;
    if (m->kv_type > KV_TYPE_LAST)
        return guild_err_set(err, "GPU worker options: KV cache format %u is not one this worker knows (0 the "
                             "backend's, 1 f32, 2 f16, 3 q8_0, 4 q4_0, 5 k8v4)", m->kv_type);
    o->kv_type = (int32_t)m->kv_type;
    o->mtp = m->mtp;
    if (plan_from_proto(o, m, err) < 0)
        return -1;
    const Guild__CudaOptions *c = m->cuda;
    if (!c)
        return 0;
    o->cuda.gpu_mem = c->gpu_mem;
    o->cuda.gpu_expert_layers = c->gpu_expert_layers;
    o->cuda.no_graph = c->no_graph;
    o->cuda.no_fuse = c->no_fuse;
    o->cuda.no_pdl = c->no_pdl;
    if (c->stager > CUDA_STAGER_LAST)
        return guild_err_set(err, "GPU worker options: stager %u is not one this worker knows (0 none, 1 thread, "
                             "2 process, 3 pin, 4 shared)", c->stager);
    o->cuda.stager = (cuda_stager_t)c->stager;
    if (to_i32(c->stage_threads, "stage_threads", &o->cuda.stage_threads, err) < 0)
        return -1;
    o->cuda.stage_ring = record_str(c->stage_ring);
    o->cuda.n_resident_layers = c->n_resident_layers;
    o->cuda.resident_layers = c->n_resident_layers ? c->resident_layers : NULL;
    o->cuda.test.split_gpu_fraction = c->test_split_gpu_fraction;
    o->cuda.no_attn_grid = c->no_attn_grid;
    o->cuda.no_attn_early = c->no_attn_early;
    o->cuda.no_attn_prefetch = c->no_attn_prefetch;
    o->cuda.no_attn_mma = c->no_attn_mma;
    o->cuda.no_norm_cluster = c->no_norm_cluster;
    o->cuda.no_mm_split = c->no_mm_split;
    o->cuda.no_xchg_fuse = c->no_xchg_fuse;
    o->cuda.no_l2_stream = c->no_l2_stream;
    return 0;
}


int gpu_worker_options_check(const gpu_worker_options_t *o, guild_err_t *err)
{
    if (!o->backend || o->n_ctx < 1 || o->n_batch < 1 || o->max_out < 1)
        return guild_err_set(err, "GPU worker options: needs options backend, n_ctx, n_batch and max_out (got "
                             "\"%s\", %d, %d, %d)", o->backend ? o->backend : "", o->n_ctx, o->n_batch, o->max_out);
    if (o->max_out > o->n_batch)
        return guild_err_set(err, "GPU worker options: max_out %d is more than n_batch %d", o->max_out, o->n_batch);
    if (o->n_threads < 0 || o->n_threads > 4096)
        return guild_err_set(err, "GPU worker options: n_threads %d (0..4096)", o->n_threads);
    const cuda_config_t *c = &o->cuda;
    if (c->gpu_expert_layers < GPU_EXPERTS_NONE)
        return guild_err_set(err, "GPU worker options: gpu_expert_layers %d (-1 none, 0 all, k > 0 at most k)",
                             c->gpu_expert_layers);
    if ((unsigned)c->stager > CUDA_STAGER_LAST)
        return guild_err_set(err, "GPU worker options: stager %d is not one this worker knows", (int)c->stager);
    if (c->stage_threads < 0 || c->stage_threads > 256)
        return guild_err_set(err, "GPU worker options: stage_threads %d (0..256)", c->stage_threads);
    if ((c->stager == CUDA_STAGER_PROCESS) != (c->stage_ring != NULL))
        return guild_err_set(err, "GPU worker options: %s", c->stage_ring ? "a staging ring for a stager other than "
                             "process" : "stager process without a staging ring");
    if (!(c->test.split_gpu_fraction >= 0 && c->test.split_gpu_fraction <= 1))
        return guild_err_set(err, "GPU worker options: test_split_gpu_fraction %g is not in [0, 1]",
                             c->test.split_gpu_fraction);
    /* the plan gave these layers' experts to no CPU worker: only a backend that keeps experts on the device
     * computes them (the cuda backend checks each layer when it is created) */
    if (o->plan.given && (o->plan.n_batch != o->n_batch || o->plan.stage_slots < 0 || o->plan.stage_slot_experts < 0))
        return guild_err_set(err, "GPU worker options: the plan's chunk of %d tokens is not n_batch %d (or its "
                             "staging is negative)", o->plan.n_batch, o->n_batch);
    /* a backend given the plan computes its resident experts (the cpu backend as a stand-in) */
    if (c->n_resident_layers && strcmp(o->backend, "cuda") != 0 && !o->plan.given)
        return guild_err_set(err, "GPU worker options: the plan leaves the experts of %zu layer%s to the GPU alone, "
                             "backend %s keeps none on the device", c->n_resident_layers,
                             c->n_resident_layers == 1 ? "" : "s", o->backend);
    return 0;
}

const void *gpu_worker_options_backend_config(const gpu_worker_options_t *o)
{
    return o->backend && !strcmp(o->backend, "cuda") ? &o->cuda : NULL;
}

void gpu_worker_options_describe(const gpu_worker_options_t *o, char *buf, size_t n)
{
    static const char *stager[] = {"none", "thread", "process", "pin", "shared"};
    int k = snprintf(buf, n, "backend %s, ctx %d, batch %d, %d logits rows, %d threads, non-finite check %s, "
                     "KV %s%s", o->backend ? o->backend : "?", o->n_ctx, o->n_batch, o->max_out, o->n_threads,
                     o->check_finite ? "on" : "off", kv_type_name(o->kv_type),
                     o->mtp ? ", the multi-token-prediction layer" : "");
    if (k < 0 || (size_t)k >= n || !gpu_worker_options_backend_config(o))
        return;
    const cuda_config_t *c = &o->cuda;
    char mem[32] = "none";
    if (c->gpu_mem)
        snprintf(mem, sizeof mem, "%.2f GiB", (double)c->gpu_mem / 1073741824.0);
    snprintf(buf + k, n - (size_t)k, "; gpu-mem %s, gpu-experts %d, graphs %s, stager %s, %zu resident layers%s",
             mem, c->gpu_expert_layers, c->no_graph ? "off" : "on",
             (unsigned)c->stager <= CUDA_STAGER_LAST ? stager[c->stager] : "?", c->n_resident_layers,
             c->test.split_gpu_fraction > 0 ? ", forced split" : "");
}

void gpu_worker_args_usage(FILE *out, const char *backends)
{
    fprintf(out,
            "usage: guild-gpu-worker --connect ENDPOINT [--key FILE --server-key FILE | --insecure] [--prof FILE]\n"
            "                        [-v]\n"
            "\n"
            "The dense side of Guild's multi-process pipeline: attention, router, shared expert and LM head\n"
            "(backends built in: %s), the routed experts through the CPU workers. Started by `guild run`;\n"
            "everything else (model, backend, sizes) comes from the coordinator.\n"
            "\n"
            "  --connect ENDPOINT   the coordinator's control socket (ipc://PATH or tcp://HOST:PORT)\n"
            "  --key FILE           tcp: this worker's CURVE key pair (`guild keygen`)\n"
            "  --server-key FILE    tcp: the coordinator's public key (its .pub file)\n"
            "  --insecure           tcp without CURVE: no authentication, no encryption\n"
            "  --prof FILE          trace the device with CUPTI (kernels, copies, memsets) and the step\n"
            "                       requests; the trace goes to FILE when the worker exits (`guild run\n"
            "                       --gpu-prof FILE` asks for it; `guild bench trace FILE` reads it)\n"
            "  -v, --verbose        more messages on stderr (-vv: debug)\n"
            "  -h, --help           this help\n",
            backends);
}

int gpu_worker_args_parse(gpu_worker_args_t *a, int argc, char **argv, guild_err_t *err)
{
    static const struct option opts[] = {
        {"connect", required_argument, NULL, 'c'},
        {"key", required_argument, NULL, 'K'},
        {"server-key", required_argument, NULL, 'P'},
        {"insecure", no_argument, NULL, 'I'},
        {"prof", required_argument, NULL, 'p'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, "c:vh", opts, NULL)) != -1) {
        switch (o) {
        case 'c': a->endpoint = optarg; break;
        case 'K': a->curve.key = optarg; break;
        case 'P': a->curve.server_key = optarg; break;
        case 'I': a->curve.insecure = true; break;
        case 'p':
            if (!*optarg) {
                guild_err_set(err, "--prof: expected a file name");
                return -1;
            }
            a->prof = optarg;
            break;
        case 'v': a->verbose++; break;
        case 'h': return 1;
        default:
            guild_err_set(err, "unknown option or missing value: %s", argv[optind - 1]);
            return -2;
        }
    }
    if (optind < argc) {
        guild_err_set(err, "unexpected argument: %s", argv[optind]);
        return -2;
    }
    if (!a->endpoint) {
        guild_err_set(err, "--connect ENDPOINT is required");
        return -2;
    }
    return guild_curve_check(&a->curve, "--connect", a->endpoint, false, err);
}
