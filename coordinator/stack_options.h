/* coordinator/stack_options.h — the coordinator's options: one record for the stack a command drives
 * (coordinator/backend_stack.h) — in one process or as the supervised multi-process pipeline — holding each
 * worker role's own record beside the stack's settings. The commands fill it from their command line
 * (coordinator/stack_flags.h: parsed once, checked once) and hand it on whole, by pointer: to the stack, the
 * pipeline and the supervisor, which completes each worker's record for its assignment and sends it
 * (gpu-worker/gpu_worker_options.h, cpu-expert-worker/cpu_worker_options.h, stager/stager_options.h). */
#ifndef GUILD_COORDINATOR_STACK_OPTIONS_H
#define GUILD_COORDINATOR_STACK_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/util/log.h"
#include "cpu-expert-worker/cpu_worker_options.h"
#include "gpu-worker/gpu_worker_options.h"
#include "ipc/curve.h"

typedef struct stack_options {
    unsigned given;          /* STACK_FLAG_* bits of the flags given on the command line (coordinator/stack_flags.h) */
    /* The stack */
    bool single_process;     /* --single-process: everything in this process (the reference) */
    int n_threads;           /* --threads: CPU threads (the single process's pool; per worker in the pipeline) */
    int32_t n_ctx;           /* KV cache positions (the command sets it once the model is known) */
    int32_t n_batch;         /* most tokens per forward pass (the command's --batch, at most n_ctx; 0: auto, the
                                stack's plan chooses: coordinator/stack_plan.h) */
    int32_t n_seq;           /* sequences the backend holds, n_ctx positions each (guild serve --parallel); 0: 1 */
    bool stats;              /* --stats: count the routing per (layer, expert) (coordinator/expert_stats.h), every
                                token through the last layer too, and the GPU plan's hit rate */
    const char *record_routing; /* --record-routing FILE: add the routing counts to this profile at the end
                                (core/model/routing_profile.h); NULL: none. backend_stack_open checks an
                                existing one first (readable, this model's) */
    bool record_replace;     /* record_routing's file is replaced, not added to, and not checked (guild optimize
                                --fresh-profile) */
    const char *routing;     /* --routing FILE|none: the profile to plan with; NULL: the model's (stack_flags_routing) */
    /* The GPU memory plan's inputs beyond the backends' settings (coordinator/stack_plan.h) */
    char routing_path[4096]; /* the routing profile to plan with: the model's MODEL.gguf.routing when there is one
                                (stack_flags_tune, unless --no-tuning); "": none */
    struct {
        double h2d_gbps, gpu_tflops, cpu_tflops, cpu_gbps; /* measured (the tuning file); 0: the default */
        char source[160];    /* where from, for the plan's printout */
    } cost;
    char gpu_mem_why[384];   /* --gpu-mem auto (coordinator/stack_plan.h, stack_plan_fit): what was decided, for the
                                commands' -v lines and guild plan; "": nothing */
    char backend_why[512];   /* --backend auto (the commands' default): what stack_flags_check found, for their -v
                                lines; "": a name was given */
    guild_log_level_t log_level; /* the workers' (their -v) */
    /* The multi-process pipeline and its supervision (coordinator/supervisor.h) */
    int cpu_workers;         /* --cpu-workers; 0: one per NUMA node */
    const char *cpu_nodes;   /* --cpu-nodes: the CPUs the workers run on, by node ("0-7/8-15"); NULL: the machine's */
    const char *listen;      /* --listen: NULL spawns the CPU workers; else they come by hand on this endpoint */
    guild_curve_options_t curve; /* --key, --allow, --insecure: a tcp --listen's security (ipc/curve.h) */
    bool fallback_local;     /* --fallback-local: a lost worker started by hand gives its shard to one of ours */
    uint32_t rejoin_ms;      /* --rejoin-ms: else how long a lost worker started by hand has to register again */
    const char *arena_dir;   /* --arena-dir: NULL: an anonymous memfd arena */
    bool huge_pages_required; /* --huge-pages require: the arena and the expert stores on huge pages or not at all */
    uint64_t spin_ns;        /* --spin-us: doorbell spin before sleeping, every process */
    int32_t prefetch_experts; /* --prefetch-experts: experts per token the dense side predicts for the next layer and
                                 the CPU workers prefetch while they wait (0: none) */
    const char *gpu_prof;    /* --gpu-prof: the GPU worker traces its device into this file (guild-gpu-worker
                                --prof); NULL: no trace */
    uint64_t wait_slice_ns;  /* the workers' doorbell wait slice */
    uint32_t heartbeat_ms;   /* period of the coordinator's heartbeats */
    uint32_t hang_ms;        /* a worker silent this long is hung */
    uint32_t stall_ms;       /* an exchange or request pending this long without progress is a hang */
    uint32_t silence_ms;     /* workers exit when the coordinator is silent this long */
    uint32_t start_ms;       /* a (re)started worker must be ready within this */
    int max_restarts;        /* deaths of one worker within a minute that are tolerated */
    uint32_t backoff_ms;     /* after more: the worker is started again this long after (doubling, up to 60 s) */
    /* Each role's own settings: the flags fill these fields, the supervisor the others per assignment */
    gpu_worker_options_t gpu; /* backend (--backend) and its settings (cuda: --gpu-mem, --gpu-experts,
                                 --no-cuda-graph, --stager, --stager-threads, --force-split), max_out,
                                 check_finite (--check-finite); also the single process's dense backend */
    cpu_worker_options_t cpu; /* mlock (--mlock), expert_layout (--expert-layout) and the tuning file's row blocks
                                 and interleaving; also the single process's experts */
} stack_options_t;

/* The defaults: backend "cpu", every online CPU (at most 1024), 8 logits rows per request, the non-finite check
 * on, doorbell spin 50 us, wait slice 100 ms, heartbeat 100 ms, hang 600 ms, stall 30 s, silence 3 s, start
 * 120 s, rejoin 10 s, 3 restarts a minute then a back-off of 2 s, log level warn; the rest zero (n_ctx and
 * n_batch are the command's to set). */
void stack_options_init(stack_options_t *o);

/* The backend's name for the commands' -v lines and guild plan: "cpu", or after --backend auto what it found,
 * "cuda (auto: cuda: 1 device)". Writes buf (n bytes; STACK_BACKEND_TEXT bytes hold the longest: backend_why, the
 * name and " (auto: ...)" around it) and returns it. */
#define STACK_BACKEND_TEXT (sizeof ((stack_options_t *)0)->backend_why + 88)
const char *stack_options_backend_text(const stack_options_t *o, char *buf, size_t n);

#endif
