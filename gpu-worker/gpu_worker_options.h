/* gpu-worker/gpu_worker_options.h — the GPU worker's options: one record for the dense side of the pipeline (its
 * backend and that backend's own settings, the sizes of its step requests, its threads and doorbell waits),
 * its one wire form (GpuWorkerOptions in proto/guild.proto, carried by Assign) and its one check.
 *
 * The coordinator fills the settings from its command line (coordinator/stack_flags.h; a single process hands
 * the same record's backend settings to its own backend), the supervisor adds what each assignment decides
 * (sizes, the resident layers of its plan, the staging ring) and sends it; guild-gpu-worker reads it back,
 * checks it and creates its backend from it. Beside it, the worker's own command line (gpu_worker_args_t: where
 * and how it connects), parsed and checked once, never sent. */
#ifndef GUILD_GPU_WORKER_GPU_WORKER_OPTIONS_H
#define GUILD_GPU_WORKER_GPU_WORKER_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/util/err.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "ipc/curve.h"
#include "proto/guild.pb-c.h"

typedef struct gpu_worker_options {
    const char *backend;    /* the dense backend's name ("cpu", "cuda") */
    int32_t n_ctx;          /* KV cache capacity in positions */
    int32_t n_batch;        /* most tokens per step request (and per MoE exchange) */
    int32_t max_out;        /* most logits rows per step request */
    int32_t n_seq;          /* sequences the backend holds (backend_options_t.n_seq); 0: 1 */
    int32_t n_threads;      /* CPU threads of the worker's pool; 0: every online CPU */
    uint64_t spin_ns;       /* doorbell spin before sleeping */
    uint64_t wait_slice_ns; /* doorbell wait slice (a peer silent this long is checked); 0: 100 ms */
    uint32_t silence_ms;    /* the worker exits when the coordinator is silent this long; 0: its default */
    cuda_config_t cuda;     /* backend "cuda"'s own settings */
    bool count_routing;     /* its backend counts the routing per (layer, expert) (backend_options_t.count_routing) */
    bool check_finite;      /* its backend checks for NaN and infinity (backend_options_t.check_finite; --check-finite) */
    bool mtp;               /* its backend runs the model's multi-token-prediction layer (backend_options_t.mtp;
                               --spec mtp, coordinator/spec.h): a single process's own backend too */
    int32_t kv_type;        /* its backend's KV cache format (backend_options_t.kv_type, KV_TYPE_*; --kv-type) */
    int32_t rollback;       /* a recurrent state kept after each row of calls of at most this many rows
                               (backend_options_t.rollback; speculative decoding's verify steps); 0: none */
    /* The coordinator's GPU memory plan (gpu-worker/dense/gpu_plan.h), which the backend follows instead of planning
     * again: its decisions (gpu_plan_import makes the plan of them and the model). */
    struct {
        bool given;
        uint64_t budget;                 /* device bytes (0: none) */
        int32_t n_batch;                 /* the chunk: n_batch */
        int32_t stage_slots, stage_slot_experts;
        const uint8_t *expert_resident;  /* [n_expert_resident] = [n_layer * n_expert], 1: resident */
        size_t n_expert_resident;
    } plan;
} gpu_worker_options_t;

/* The wire form's storage: the message and its nested one. */
typedef struct gpu_worker_options_msg {
    Guild__GpuWorkerOptions m;
    Guild__CudaOptions cuda;
    Guild__GpuPlan plan;
} gpu_worker_options_msg_t;

/* Fills *msg (msg->m is the message to send) from o; its strings and arrays point into o, which must outlive
 * the message. Every field travels. */
void gpu_worker_options_to_proto(const gpu_worker_options_t *o, gpu_worker_options_msg_t *msg);

/* The record of a received message (its strings and arrays point into m, which must outlive *o). -1 with err
 * on a number the record cannot hold. */
int gpu_worker_options_from_proto(gpu_worker_options_t *o, const Guild__GpuWorkerOptions *m, guild_err_t *err);

/* The one check of a GPU worker's options (guild-gpu-worker runs it on every Assign): -1 with err naming the
 * field ("GPU worker options: ...") when one is missing, out of range, or does not fit the backend. */
int gpu_worker_options_check(const gpu_worker_options_t *o, guild_err_t *err);

/* What backend_new takes as config for o->backend: &o->cuda for "cuda", NULL for a backend without settings. */
const void *gpu_worker_options_backend_config(const gpu_worker_options_t *o);

/* "backend cuda, ctx 4096, batch 256, 16 threads, gpu-mem 24.0 GiB, ..." into buf (n bytes), for logs. */
void gpu_worker_options_describe(const gpu_worker_options_t *o, char *buf, size_t n);

/* guild-gpu-worker's command line. */
typedef struct gpu_worker_args {
    const char *endpoint;        /* --connect ENDPOINT: the coordinator's control socket */
    guild_curve_options_t curve; /* --key, --server-key, --insecure (ipc/curve.h): a tcp ENDPOINT needs them */
    int verbose;                 /* -v count */
    const char *prof;            /* --prof FILE: trace the device (CUPTI) and the step requests into FILE, written
                                    when the worker exits (core/prof/prof_trace.h); NULL: no trace */
} gpu_worker_args_t;

/* The --help text; backends: the names of the dense backends built in (backend_names()). */
void gpu_worker_args_usage(FILE *out, const char *backends);

/* Parses argv (getopt_long from optind 1) into *a and checks it: 0, 1 when --help was asked (the caller prints
 * it), -1 with err on a bad value or combination, -2 with err on an unknown flag, a stray argument or no
 * --connect (the caller adds the usage). */
int gpu_worker_args_parse(gpu_worker_args_t *a, int argc, char **argv, guild_err_t *err);

#endif
