#include "config.h"

#include "coordinator/stack_flags.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/routing_profile.h"
#include "core/util/cli.h"
#include "cpu-expert-worker/experts/expert_tuning.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"

/* One flag: its bit (and getopt value STACK_FLAGS_OPT_BASE + its index), name, argument, help ('\n' starts a
 * continuation line). The help lines print in this order. */
typedef struct flag {
    unsigned bit;
    const char *name;
    const char *arg;  /* NULL: no value */
    const char *help; /* NULL: printed by stack_flags_usage itself */
    bool multi;       /* for the multi-process mode only */
} flag_t;

/* --cuda-off's parts: each a name and the cuda_config_t switch it sets. */
static const struct {
    const char *name;
    size_t off; /* offsetof(cuda_config_t, the bool) */
} cuda_off_parts[] = {
    {"fuse", offsetof(cuda_config_t, no_fuse)},
    {"pdl", offsetof(cuda_config_t, no_pdl)},
    {"attn-grid", offsetof(cuda_config_t, no_attn_grid)},
    {"attn-early", offsetof(cuda_config_t, no_attn_early)},
    {"attn-prefetch", offsetof(cuda_config_t, no_attn_prefetch)},
    {"attn-mma", offsetof(cuda_config_t, no_attn_mma)},
    {"norm-cluster", offsetof(cuda_config_t, no_norm_cluster)},
    {"mm-split", offsetof(cuda_config_t, no_mm_split)},
    {"xchg-fuse", offsetof(cuda_config_t, no_xchg_fuse)},
    {"l2-stream", offsetof(cuda_config_t, no_l2_stream)},
};
#define N_CUDA_OFF (sizeof cuda_off_parts / sizeof cuda_off_parts[0])

/* The switch of cuda the part p[0 .. len) names, or NULL. */
static bool *cuda_off_part(cuda_config_t *cuda, const char *p, size_t len)
{
    for (size_t i = 0; i < N_CUDA_OFF; i++)
        if (strlen(cuda_off_parts[i].name) == len && !strncmp(p, cuda_off_parts[i].name, len))
            return (bool *)((char *)cuda + cuda_off_parts[i].off);
    return NULL;
}

/* The parts' names, comma-separated, into names[n] (for the error); names. */
static const char *cuda_off_names(char *names, size_t n)
{
    names[0] = '\0';
    for (size_t i = 0, at = 0; i < N_CUDA_OFF && at < n; i++)
        at += (size_t)snprintf(names + at, n - at, "%s%s", i ? ", " : "", cuda_off_parts[i].name);
    return names;
}

static const flag_t flags[] = {
    {STACK_FLAG_SINGLE, "single-process", NULL,
     "run every stage in this process (the reference; default: a GPU worker\n"
     "process and CPU expert worker processes, supervised and restarted)", false},
    {STACK_FLAG_THREADS, "threads", "N", NULL, false},
    {STACK_FLAG_NO_TUNING, "no-tuning", NULL,
     "ignore MODEL.tuning (written by `guild optimize`: threads and the CPU\n"
     "expert pipeline's row blocks; speed only, the output is the same)", false},
    {STACK_FLAG_CPU_WORKERS, "cpu-workers", "K",
     "CPU expert workers (default: one per NUMA node); workers on one node\n"
     "split its CPUs, with the cuda backend less two of node 0's left to the\n"
     "GPU worker (guild plan prints each one's)", true},
    {STACK_FLAG_CPU_NODES, "cpu-nodes", "LIST",
     "the CPUs the CPU workers run on, by node: CPU lists separated by / between\n"
     "nodes (0-7/8-15: two nodes of 8 CPUs; default: this machine's NUMA nodes);\n"
     "workers go to the nodes round robin, memory to each node's first CPU's", true},
    {STACK_FLAG_LISTEN, "listen", "ENDPOINT",
     "do not start the CPU workers: wait for `guild-cpu-worker --connect\n"
     "ENDPOINT` started by hand (ipc://PATH on this host, or tcp://HOST:PORT\n"
     "with --key and --allow, or --insecure)", true},
    {STACK_FLAG_ARENA_DIR, "arena-dir", "DIR",
     "shared memory as a file in DIR (/dev/shm, a hugetlbfs mount) instead of\n"
     "an anonymous memfd", true},
    {STACK_FLAG_MLOCK, "mlock", NULL, "lock the CPU workers' experts in RAM", true},
    {STACK_FLAG_HUGE_PAGES, "huge-pages", "MODE",
     "the shared memory's pages (the arena, the CPU workers' expert copies): auto\n"
     "(the default) takes 2 MiB hugetlb pages where enough are free, else\n"
     "transparent huge pages where the kernel gives them to shared memory, else\n"
     "4 KiB pages (the reason logged with -v); require refuses to start without\n"
     "huge pages", true},
    {STACK_FLAG_SPIN_US, "spin-us", "N", "spin N us on a doorbell before sleeping (default 50)", true},
    {STACK_FLAG_PREFETCH_EXPERTS, "prefetch-experts", "N",
     "with experts on the CPU workers: the GPU worker predicts each token's N\n"
     "likeliest experts of the next layer (its router applied to this layer's\n"
     "input) and the workers pull their bytes toward their cores while they wait\n"
     "for it (0: off; default 4; at most the model's experts per token); the\n"
     "same output either way; decode only (4 tokens or fewer a step)", true},
    {STACK_FLAG_GPU_PROF, "gpu-prof", "FILE",
     "the GPU worker traces its device with CUPTI (every kernel, copy and memset;\n"
     "a graph's kernels one by one) and its step requests, and writes the trace\n"
     "to FILE when it exits; `guild bench trace FILE` sums its decode steps per\n"
     "kernel (the cuda backend; tracing slows the steps it traces)", true},
    {STACK_FLAG_BACKEND, "backend", "NAME", NULL, false},
    {STACK_FLAG_GPU_MEM, "gpu-mem", "SIZE|auto",
     "device memory budget of the cuda backend (8G, 24GiB...): dense weights, KV\n"
     "cache and buffers must fit; experts of as many layers as fit stay on the\n"
     "GPU (default auto: no budget, every expert on the GPU, when the whole model\n"
     "fits the device's memory less what other processes hold of it; else that\n"
     "is the budget)", false},
    {STACK_FLAG_GPU_EXPERTS, "gpu-experts", "N", "at most N layers' experts on the GPU (all: as many as fit; none: 0)",
     false},
    {STACK_FLAG_NO_GRAPH, "no-cuda-graph", NULL,
     "enqueue every kernel of every step (debugging; default: decode steps are\n"
     "replayed CUDA graphs)", false},
    {STACK_FLAG_CUDA_OFF, "cuda-off", "LIST",
     "debugging: turn off parts of the cuda backend's step, comma-separated:\n"
     "fuse (the block norms' fused neighbours run as separate launches), pdl\n"
     "(no programmatic dependent launch), attn-grid (the decode attention a\n"
     "block a split), attn-early (its row lengths read after the wait on the\n"
     "kernel before), attn-prefetch (no L2 prefetch of its keys and values\n"
     "before that wait): the same output either way; attn-mma (the decode\n"
     "attention's FMA forms in place of its tensor-core form over F16 caches:\n"
     "other rounding, within the attention's tolerance), norm-cluster (the\n"
     "fused norm one block a row, not a cluster of blocks), mm-split (one-token\n"
     "products a warp a row, not a row's blocks over several warps), xchg-fuse\n"
     "(the MoE exchange's publish and take of rows as launches of their own,\n"
     "not in the router's and the next norm's), l2-stream (the routed experts'\n"
     "weights at L2's normal priority, not marked as streaming): the same\n"
     "output", false},
    {STACK_FLAG_STAGER, "stager", "KIND",
     "how the cuda backend copies the experts it streams under --gpu-mem: shared\n"
     "(the default: straight from the CPU side's own copies of the experts,\n"
     "registered for DMA in place: the bus's speed, no second copy in RAM),\n"
     "process (a guild-stager process fills pinned slots), thread (copy threads\n"
     "in the GPU's process), pin (the streamed experts copied once more into\n"
     "page-locked RAM) or none (plain copies from the model's pageable mapping);\n"
     "same output either way; other backends never stream and ignore it", false},
    {STACK_FLAG_STAGER_THREADS, "stager-threads", "K",
     "the stager's copy threads (default: half the online CPUs)", false},
    {STACK_FLAG_FORCE_SPLIT, "force-split", "F",
     "tests: every prefill batch of a streamed layer splits its experts with\n"
     "the GPU taking at least fraction F (0 < F <= 1) of the pairs, whatever\n"
     "the measured times (the same bits run after run)", false},
    {STACK_FLAG_EXPERT_LAYOUT, "expert-layout", "L",
     "the CPU experts' weights: packed (16 rows interleaved for the one-token\n"
     "kernels; a single process then copies the experts out of the file), plain,\n"
     "or auto (packed where this CPU has packed kernels for the type); default:\n"
     "the tuning file's, else auto; same output either way", false},
    {STACK_FLAG_RECORD_ROUTING, "record-routing", "FILE",
     "count the experts the router chooses, per layer, and add the counts to the\n"
     "routing profile FILE at the end (created when absent); a profile beside\n"
     "the model (MODEL.gguf.routing) fills a GPU budget with the hottest experts", false},
    {STACK_FLAG_ROUTING, "routing", "FILE",
     "the routing profile whose hottest experts fill the GPU's budget (default:\n"
     "MODEL.gguf.routing when there is one, unless --no-tuning; none: no\n"
     "profile, whole layers); same output either way", false},
    {STACK_FLAG_KEY, "key", "FILE",
     "a tcp --listen: this coordinator's CURVE key pair (`guild keygen`; its\n"
     ".pub is the workers' --server-key)", true},
    {STACK_FLAG_ALLOW, "allow", "FILE",
     "a tcp --listen: the public keys of the workers it accepts (their .pub\n"
     "lines); every other key is refused", true},
    {STACK_FLAG_INSECURE, "insecure", NULL,
     "a tcp --listen without CURVE: no authentication, no encryption (anyone\n"
     "who reaches the port may join as a worker and read the activations)", true},
    {STACK_FLAG_CHECK_FINITE, "check-finite", "on|off",
     "check every layer's residual stream and norm outputs, and the logits, for\n"
     "NaN and infinity: a request that meets one fails with a message naming\n"
     "the layer, the tensor and the position (default on; the output is the same)", false},
    {STACK_FLAG_KV_TYPE, "kv-type", "F",
     "the KV cache's format: f32, f16, q8_0 or q4_0 (GGUF's 32-element blocks\n"
     "with an f16 scale, keys and values), k8v4 (keys q8_0, values q4_0 after a\n"
     "Walsh-Hadamard rotation of each head); default: the backend's own (cpu f32,\n"
     "cuda f16). Bytes per position and accuracy: bench/results/kv-types-*.md", false},
    {STACK_FLAG_FALLBACK_LOCAL, "fallback-local", NULL,
     "with --listen: a worker started by hand that is lost (dead, silent, its\n"
     "link down) gives its shard to a worker this coordinator starts on this\n"
     "host, which resumes where it stopped", true},
    {STACK_FLAG_REJOIN_MS, "rejoin-ms", "MS",
     "with --listen and without --fallback-local: how long a lost worker\n"
     "started by hand has to register again before the run fails naming it\n"
     "(default 10000)", true},
};
enum { N_FLAGS = sizeof flags / sizeof flags[0] };
_Static_assert(N_FLAGS == 30, "STACK_FLAGS_ALL and STACK_FLAGS_OPT_BASE's range name 30 flags");

size_t stack_flags_options(struct option *out, size_t cap, const struct option *own, unsigned mask)
{
    size_t n = 0;
    for (; own[n].name; n++) {
        GUILD_ASSERT(n + 1 < cap);
        out[n] = own[n];
    }
    for (int i = 0; i < N_FLAGS; i++) {
        if (!(mask & flags[i].bit))
            continue;
        GUILD_ASSERT(n + 1 < cap);
        out[n++] = (struct option){flags[i].name, flags[i].arg ? required_argument : no_argument, NULL,
                                   STACK_FLAGS_OPT_BASE + i};
    }
    out[n] = (struct option){NULL, 0, NULL, 0};
    return n;
}

int stack_flags_parse(stack_options_t *o, int opt, const char *arg, guild_err_t *err)
{
    if (opt < STACK_FLAGS_OPT_BASE || opt >= STACK_FLAGS_OPT_BASE + N_FLAGS)
        return 0;
    cuda_config_t *cuda = &o->gpu.cuda;
    long v;
    const unsigned bit = flags[opt - STACK_FLAGS_OPT_BASE].bit;
    switch (bit) {
    case STACK_FLAG_SINGLE: o->single_process = true; break;
    case STACK_FLAG_RECORD_ROUTING: o->record_routing = arg; break;
    case STACK_FLAG_ROUTING: o->routing = arg; break;
    case STACK_FLAG_THREADS:
        if (cli_parse_long("--threads", arg, 1, 1024, &v, err) < 0)
            return -1;
        o->n_threads = (int)v;
        break;
    case STACK_FLAG_NO_TUNING: break;
    case STACK_FLAG_CPU_WORKERS:
        if (cli_parse_long("--cpu-workers", arg, 1, 4096, &v, err) < 0)
            return -1;
        o->cpu_workers = (int)v;
        break;
    case STACK_FLAG_LISTEN: o->listen = arg; break;
    case STACK_FLAG_CPU_NODES: o->cpu_nodes = arg; break;
    case STACK_FLAG_KEY: o->curve.key = arg; break;
    case STACK_FLAG_ALLOW: o->curve.allow = arg; break;
    case STACK_FLAG_INSECURE: o->curve.insecure = true; break;
    case STACK_FLAG_CHECK_FINITE:
        if (strcmp(arg, "on") && strcmp(arg, "off"))
            return guild_err_set(err, "--check-finite %s: expected on or off", arg);
        o->gpu.check_finite = !strcmp(arg, "on");
        break;
    case STACK_FLAG_KV_TYPE:
        if (kv_type_parse(arg, &o->gpu.kv_type, err) < 0)
            return -1;
        break;
    case STACK_FLAG_FALLBACK_LOCAL: o->fallback_local = true; break;
    case STACK_FLAG_REJOIN_MS:
        if (cli_parse_long("--rejoin-ms", arg, 100, 3600000, &v, err) < 0)
            return -1;
        o->rejoin_ms = (uint32_t)v;
        break;
    case STACK_FLAG_ARENA_DIR: o->arena_dir = arg; break;
    case STACK_FLAG_MLOCK: o->cpu.mlock = true; break;
    case STACK_FLAG_HUGE_PAGES:
        if (strcmp(arg, "auto") && strcmp(arg, "require"))
            return guild_err_set(err, "--huge-pages %s: expected auto or require", arg);
        o->huge_pages_required = !strcmp(arg, "require");
        break;
    case STACK_FLAG_SPIN_US:
        if (cli_parse_long("--spin-us", arg, 0, 1000000, &v, err) < 0)
            return -1;
        o->spin_ns = (uint64_t)v * 1000u;
        break;
    case STACK_FLAG_PREFETCH_EXPERTS:
        if (cli_parse_long("--prefetch-experts", arg, 0, 32, &v, err) < 0)
            return -1;
        o->prefetch_experts = (int32_t)v;
        break;
    case STACK_FLAG_GPU_PROF:
        if (!*arg)
            return guild_err_set(err, "--gpu-prof: expected a file name");
        o->gpu_prof = arg;
        break;
    case STACK_FLAG_BACKEND: o->gpu.backend = arg; break;
    case STACK_FLAG_GPU_MEM:
        if (!strcmp(arg, "auto")) /* the default: decided once the model is known (stack_plan_fit) */
            cuda->gpu_mem = 0;
        else if (gpu_plan_parse_size(arg, "--gpu-mem", &cuda->gpu_mem, err) < 0)
            return -1;
        break;
    case STACK_FLAG_GPU_EXPERTS:
        if (!strcmp(arg, "all"))
            cuda->gpu_expert_layers = 0;
        else if (!strcmp(arg, "none") || !strcmp(arg, "0"))
            cuda->gpu_expert_layers = GPU_EXPERTS_NONE;
        else if (cli_parse_long("--gpu-experts", arg, 1, 1 << 20, &v, err) < 0)
            return -1;
        else
            cuda->gpu_expert_layers = (int32_t)v;
        break;
    case STACK_FLAG_NO_GRAPH: cuda->no_graph = true; break;
    case STACK_FLAG_CUDA_OFF:
        for (const char *p = arg;;) {
            const size_t len = strcspn(p, ",");
            bool *off = cuda_off_part(cuda, p, len);
            char names[128];
            if (!off)
                return guild_err_set(err, "--cuda-off %s: expected %s, comma-separated", arg,
                                     cuda_off_names(names, sizeof names));
            *off = true;
            if (!p[len])
                break;
            p += len + 1;
        }
        break;
    case STACK_FLAG_STAGER:
        if (!strcmp(arg, "none"))
            cuda->stager = CUDA_STAGER_NONE;
        else if (!strcmp(arg, "thread"))
            cuda->stager = CUDA_STAGER_THREAD;
        else if (!strcmp(arg, "process"))
            cuda->stager = CUDA_STAGER_PROCESS;
        else if (!strcmp(arg, "pin"))
            cuda->stager = CUDA_STAGER_PIN;
        else if (!strcmp(arg, "shared"))
            cuda->stager = CUDA_STAGER_SHARED;
        else
            return guild_err_set(err, "--stager %s: expected shared, none, thread, process or pin", arg);
        break;
    case STACK_FLAG_STAGER_THREADS:
        if (cli_parse_long("--stager-threads", arg, 1, 256, &v, err) < 0)
            return -1;
        cuda->stage_threads = (int32_t)v;
        break;
    case STACK_FLAG_FORCE_SPLIT: {
        char *end;
        const double fr = strtod(arg, &end);
        if (end == arg || *end || !(fr > 0 && fr <= 1))
            return guild_err_set(err, "--force-split %s: expected a fraction in (0, 1]", arg);
        cuda->test.split_gpu_fraction = fr;
        break;
    }
    case STACK_FLAG_EXPERT_LAYOUT:
        if (expert_layout_from_name(arg, &o->cpu.expert_layout) < 0)
            return guild_err_set(err, "--expert-layout %s: expected auto, plain or packed", arg);
        break;
    default: GUILD_ASSERT(!"a flag without a case");
    }
    o->given |= bit;
    return 1;
}

int stack_flags_check(stack_options_t *o, unsigned mask, const char *also, bool also_given, guild_err_t *err)
{
    const cuda_config_t *cuda = &o->gpu.cuda;
    const bool stager_given = o->given & STACK_FLAG_STAGER;
    if (o->gpu.backend && !strcmp(o->gpu.backend, "auto")) /* the one place the name is resolved */
        o->gpu.backend = backend_auto(o->backend_why, sizeof o->backend_why);
    if (!o->single_process && guild_curve_check(&o->curve, "--listen", o->listen, true, err) < 0)
        return -1;
    if (!o->single_process && !o->listen && (o->given & (STACK_FLAG_FALLBACK_LOCAL | STACK_FLAG_REJOIN_MS)))
        return guild_err_set(err, "--fallback-local and --rejoin-ms are for workers started by hand (--listen)");
    if (o->fallback_local && (o->given & STACK_FLAG_REJOIN_MS))
        return guild_err_set(err, "--rejoin-ms is for a lost worker's return; with --fallback-local none is waited "
                             "for");
    const bool ring = stager_given && (cuda->stager == CUDA_STAGER_THREAD || cuda->stager == CUDA_STAGER_PROCESS);
    if (!ring && (o->given & STACK_FLAG_STAGER_THREADS))
        return guild_err_set(err, "--stager-threads is for --stager thread or process, not --stager %s",
                             !stager_given || cuda->stager == CUDA_STAGER_SHARED ? "shared"
                             : cuda->stager == CUDA_STAGER_PIN                  ? "pin"
                                                                                : "none");
    if (o->single_process && stager_given && cuda->stager == CUDA_STAGER_PROCESS)
        return guild_err_set(err, "--stager process is for the multi-process mode (its supervisor runs "
                             "guild-stager); --single-process takes --stager shared, thread, pin or none");
    if (o->given & STACK_FLAG_GPU_PROF) {
        if (strcmp(o->gpu.backend, "cuda"))
            return guild_err_set(err, "--gpu-prof traces the cuda backend's device, not --backend %s", o->gpu.backend);
#ifndef GUILD_HAVE_CUPTI
        return guild_err_set(err, "--gpu-prof: this build cannot trace the GPU (configure found no CUPTI beside the "
                             "CUDA runtime)");
#endif
    }
    if (!stager_given) /* the default, in both modes: no second copy of the experts */
        o->gpu.cuda.stager = CUDA_STAGER_SHARED;
    if (!o->single_process)
        return 0;
    const char *names[N_FLAGS + 1];
    int n = 0;
    bool any = also && also_given;
    for (int i = 0; i < N_FLAGS; i++)
        if (flags[i].multi && (mask & flags[i].bit)) {
            names[n++] = flags[i].name;
            any = any || (o->given & flags[i].bit);
        }
    if (!any)
        return 0;
    char list[512] = "";
    size_t len = 0;
    for (int i = 0; i < n + (also != NULL); i++) {
        const bool last = i == n + (also != NULL) - 1;
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s%s", i == 0 ? "" : last ? " and " : ", ",
                                i < n ? "--" : "", i < n ? names[i] : also);
        GUILD_ASSERT(len < sizeof list);
    }
    return guild_err_set(err, "%s %s for the multi-process mode, not --single-process", list,
                         n + (also != NULL) > 1 ? "are" : "is");
}

void stack_flags_usage(FILE *out, unsigned mask, const char *backend_default)
{
    for (int i = 0; i < N_FLAGS; i++) {
        const flag_t *fl = &flags[i];
        if (!(mask & fl->bit))
            continue;
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", fl->name, fl->arg ? " " : "", fl->arg ? fl->arg : "");
        if (strlen(left) < 20)
            fprintf(out, "      %-20s", left);
        else /* a flag past the column: its help starts on the next line */
            fprintf(out, "      %s\n%26s", left, "");
        if (fl->bit == STACK_FLAG_THREADS && (mask & STACK_FLAG_NO_TUNING))
            fprintf(out, "CPU threads (default: the model's tuning file, else all online CPUs);\n%26s"
                    "multi-process: per worker\n", "");
        else if (fl->bit == STACK_FLAG_THREADS)
            fprintf(out, "CPU threads (default: all online CPUs); multi-process: per worker\n");
        else if (fl->bit == STACK_FLAG_BACKEND)
            fprintf(out, "dense-layer backend (default %s; built in: %s)%s\n", backend_default, backend_names(),
                    strcmp(backend_default, "auto") ? ""
                                                    : ";\n                          auto: a GPU backend where this "
                                                      "build has one and it finds a\n                          device "
                                                      "(-v says which and why), else cpu");
        else
            for (const char *s = fl->help; *s;) {
                size_t k = strcspn(s, "\n");
                fprintf(out, "%s%.*s\n", s == fl->help ? "" : "                          ", (int)k, s);
                s += k + (s[k] == '\n');
            }
    }
}

int stack_flags_parse_batch(const char *arg, int32_t *n_batch, guild_err_t *err)
{
    long v;
    if (!strcmp(arg, "auto")) {
        *n_batch = 0;
        return 0;
    }
    if (cli_parse_long("--batch", arg, 1, 1 << 16, &v, err) < 0)
        return guild_err_set(err, "--batch %s: expected auto or a number of tokens from 1 to 65536", arg);
    *n_batch = (int32_t)v;
    return 0;
}

int stack_flags_routing(stack_options_t *o, const char *model_path, guild_err_t *err)
{
    o->routing_path[0] = '\0';
    if (o->routing) {
        if (strcmp(o->routing, "none") &&
            (size_t)snprintf(o->routing_path, sizeof o->routing_path, "%s", o->routing) >= sizeof o->routing_path)
            return guild_err_set(err, "--routing %s: path too long", o->routing);
        return 0;
    }
    if (o->given & STACK_FLAG_NO_TUNING)
        return 0;
    /* the routing profile beside the model: the GPU plan reads (and checks) it */
    char rp[sizeof o->routing_path];
    if (routing_profile_path(model_path, rp, sizeof rp, err) < 0)
        return -1;
    if (access(rp, F_OK) == 0)
        snprintf(o->routing_path, sizeof o->routing_path, "%s", rp);
    return 0;
}

int stack_flags_tune(stack_options_t *o, const char *model_path, const char *who, guild_err_t *err)
{
    if (stack_flags_routing(o, model_path, err) < 0)
        return -1;
    if (o->given & STACK_FLAG_NO_TUNING)
        return 0;
    /* the costs it measured, for the GPU plan */
    expert_tuning_t t;
    bool found = false;
    if (expert_tuning_load_for_model(model_path, &t, &found, err) < 0)
        return guild_err_prefix(err, "tuning file (--no-tuning ignores it): ");
    if (found && (t.cost.cpu_tflops > 0 || t.cost.cpu_gbps > 0 || t.cost.h2d_gbps > 0 || t.cost.gpu_tflops > 0)) {
        o->cost.h2d_gbps = t.cost.h2d_gbps;
        o->cost.gpu_tflops = t.cost.gpu_tflops;
        o->cost.cpu_tflops = t.cost.cpu_tflops;
        o->cost.cpu_gbps = t.cost.cpu_gbps;
        snprintf(o->cost.source, sizeof o->cost.source, "%s.tuning, measured on %s (defaults for the rest)",
                 model_path, t.cpu[0] ? t.cpu : "this machine");
    }
    cpu_worker_options_t *c = &o->cpu;
    int layout = o->given & STACK_FLAG_EXPERT_LAYOUT ? (int)c->expert_layout : -1; /* < 0: the file's applies */
    if (expert_tuning_apply(model_path, who, o->given & STACK_FLAG_THREADS, &o->n_threads, &c->gate_up_rows,
                            &c->down_rows, &c->interleave_gate_up, &layout, err) < 0)
        return -1;
    c->expert_layout = layout < 0 ? EXPERT_LAYOUT_AUTO : (expert_layout_t)layout;
    return 0;
}
