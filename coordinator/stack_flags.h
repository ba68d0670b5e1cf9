/* coordinator/stack_flags.h — the flags that choose and tune the stack a command drives
 * (coordinator/backend_stack.h), in one place for `guild run`, `guild serve` and `guild bench run`: their getopt
 * entries, the parsing of their values into the coordinator's options record (coordinator/stack_options.h), the
 * one check of the record (flags that do not go together, multi-process flags with --single-process), their
 * --help lines, and what --threads and --no-tuning do with the model's tuning file. A command takes the subset
 * its mask names and keeps its own flags around them. */
#ifndef GUILD_COORDINATOR_STACK_FLAGS_H
#define GUILD_COORDINATOR_STACK_FLAGS_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "coordinator/stack_options.h"
#include "core/util/err.h"

/* The flags, as bits of a command's mask. "multi-process" ones are refused with --single-process. */
enum {
    STACK_FLAG_SINGLE = 1u << 0,       /* --single-process */
    STACK_FLAG_THREADS = 1u << 1,      /* --threads N */
    STACK_FLAG_NO_TUNING = 1u << 2,    /* --no-tuning (a command with it reads the tuning file: stack_flags_tune) */
    STACK_FLAG_CPU_WORKERS = 1u << 3,  /* --cpu-workers K (multi-process) */
    STACK_FLAG_LISTEN = 1u << 4,       /* --listen ENDPOINT (multi-process) */
    STACK_FLAG_ARENA_DIR = 1u << 5,    /* --arena-dir DIR (multi-process) */
    STACK_FLAG_MLOCK = 1u << 6,        /* --mlock (multi-process) */
    STACK_FLAG_SPIN_US = 1u << 7,      /* --spin-us N (multi-process) */
    STACK_FLAG_BACKEND = 1u << 8,      /* --backend NAME */
    STACK_FLAG_GPU_MEM = 1u << 9,      /* --gpu-mem SIZE */
    STACK_FLAG_GPU_EXPERTS = 1u << 10, /* --gpu-experts N|all|none */
    STACK_FLAG_NO_GRAPH = 1u << 11,    /* --no-cuda-graph */
    STACK_FLAG_STAGER = 1u << 12,      /* --stager none|thread|process */
    STACK_FLAG_STAGER_THREADS = 1u << 13, /* --stager-threads K */
    STACK_FLAG_FORCE_SPLIT = 1u << 14, /* --force-split F (tests) */
    STACK_FLAG_EXPERT_LAYOUT = 1u << 15, /* --expert-layout auto|plain|packed */
    STACK_FLAG_RECORD_ROUTING = 1u << 16, /* --record-routing FILE */
    STACK_FLAG_ROUTING = 1u << 17,     /* --routing FILE|none */
    STACK_FLAG_KEY = 1u << 18,         /* --key FILE (multi-process; with a tcp --listen) */
    STACK_FLAG_ALLOW = 1u << 19,       /* --allow FILE (multi-process; with a tcp --listen) */
    STACK_FLAG_INSECURE = 1u << 20,    /* --insecure (multi-process; with a tcp --listen) */
    STACK_FLAG_CHECK_FINITE = 1u << 21, /* --check-finite on|off */
    STACK_FLAG_FALLBACK_LOCAL = 1u << 22, /* --fallback-local (multi-process; with --listen) */
    STACK_FLAG_REJOIN_MS = 1u << 23,   /* --rejoin-ms MS (multi-process; with --listen) */
    STACK_FLAG_KV_TYPE = 1u << 24,     /* --kv-type f32|f16|q8_0|q4_0|k8v4 */
    STACK_FLAG_CPU_NODES = 1u << 25,   /* --cpu-nodes LIST (multi-process) */
    STACK_FLAG_CUDA_OFF = 1u << 26,    /* --cuda-off fuse,pdl (debugging) */
    STACK_FLAG_HUGE_PAGES = 1u << 27,  /* --huge-pages auto|require (multi-process) */
    STACK_FLAG_PREFETCH_EXPERTS = 1u << 28, /* --prefetch-experts N (multi-process) */
    STACK_FLAG_GPU_PROF = 1u << 29,    /* --gpu-prof FILE (multi-process; backend cuda, a build with CUPTI) */
    STACK_FLAGS_ALL = (1u << 30) - 1,
};

/* getopt_long values of the flags: [STACK_FLAGS_OPT_BASE, STACK_FLAGS_OPT_BASE + 30); a command's own values
 * must stay below. */
#define STACK_FLAGS_OPT_BASE 0x4000


/* Writes into out[cap] the command's own getopt entries (own, up to its {NULL} terminator), then those of the
 * flags in mask, then a terminator. Returns the number of entries before the terminator; cap too small is a
 * bug (asserted). */
size_t stack_flags_options(struct option *out, size_t cap, const struct option *own, unsigned mask);

/* Takes getopt_long's value `opt` with its argument: 1 when it is one of these flags (o updated, its bit set in
 * o->given), 0 when it is not, -1 with err ("--cpu-workers 0: expected ...") on a bad value. o starts from
 * stack_options_init (a command may change a default, such as the backend, before parsing). */
int stack_flags_parse(stack_options_t *o, int opt, const char *arg, guild_err_t *err);

/* After parsing, the record's one check. First resolves --backend auto (the commands' default) to a backend's name
 * (backend_auto; o->backend_why says why). Then -1 with err when a tcp --listen comes without CURVE keys (--key and
 * --allow) or --insecure, or keys without one (guild_curve_check); when --stager-threads comes with --stager none
 * or pin, or --stager process with --single-process; when --gpu-prof comes with a backend other than cuda or in a
 * build without CUPTI; -1 with err ("--cpu-workers, --mlock and --print-plan are for the multi-process mode, not
 * --single-process") when --single-process comes with a multi-process flag of mask, or with the command's own
 * multi-process flags `also` (a name list such as "--print-plan"; NULL: none) when also_given. The message lists
 * every multi-process flag the command has. Without --stager, sets the cuda backend's stager to the default of
 * both modes, shared (the CPU side's own copies registered in place). */
int stack_flags_check(stack_options_t *o, unsigned mask, const char *also, bool also_given, guild_err_t *err);

/* A command's --batch value: "auto" (0: the stack's GPU plan chooses, coordinator/stack_plan.h) or 1..65536
 * tokens, into *n_batch. -1 with err otherwise. */
int stack_flags_parse_batch(const char *arg, int32_t *n_batch, guild_err_t *err);

/* The --help line of --batch, the same for every command that takes it. */
#define STACK_FLAGS_BATCH_HELP                                                                                    \
    "      --batch N|auto      prompt tokens per forward pass, at most (default auto: with a GPU memory plan\n"    \
    "                          the plan's chunk, up to 8192 as the budget allows; else 256); same output\n"

/* Names the routing profile the GPU plan fills its budget from (stack_options_t.routing_path): --routing FILE,
 * nothing with --routing none, else the model's MODEL.gguf.routing when it exists (unless --no-tuning). The
 * file is read and checked when the plan is made. -1 with err when the name does not fit. */
int stack_flags_routing(stack_options_t *o, const char *model_path, guild_err_t *err);

/* The --help lines of the flags in mask; backend_default is the default --backend the command shows. */
void stack_flags_usage(FILE *out, unsigned mask, const char *backend_default);

/* Applies the model's tuning file (cpu-expert-worker/experts/expert_tuning.h) unless --no-tuning: threads (unless
 * --threads), the CPU experts' row blocks and layout, the costs it measured (the GPU plan's cost model); and
 * names the model's routing profile (MODEL.gguf.routing, core/model/routing_profile.h) for the GPU plan when
 * there is one. `who` prefixes its message ("guild run"). -1 with err when the tuning file exists but is
 * unreadable or malformed. */
int stack_flags_tune(stack_options_t *o, const char *model_path, const char *who, guild_err_t *err);

#endif
