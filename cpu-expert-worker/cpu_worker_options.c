#include "config.h"

#include "cpu-expert-worker/cpu_worker_options.h"

#include <stdint.h>
#include <string.h>

/* Row blocks past this are no tuning anyone measured (expert_pipe_tuning_t takes int32) */
#define MAX_ROWS (1 << 20)

void cpu_worker_options_to_proto(const cpu_worker_options_t *o, Guild__CpuWorkerOptions *m)
{
    guild__cpu_worker_options__init(m);
    m->n_threads = (uint32_t)o->n_threads;
    m->spin_ns = o->spin_ns;
    m->wait_slice_ns = o->wait_slice_ns;
    m->silence_ms = o->silence_ms;
    m->node = o->node;
    m->n_cpus = o->n_cpus;
    m->cpus = (uint32_t *)o->cpus;
    m->mlock = o->mlock;
    m->data_endpoint = (char *)(o->data_endpoint ? o->data_endpoint : ""); /* proto3: "" is "not given" */
    m->gate_up_rows = (uint32_t)o->gate_up_rows;
    m->down_rows = (uint32_t)o->down_rows;
    m->interleave_gate_up = o->interleave_gate_up;
    m->expert_layout = (uint32_t)o->expert_layout;
}

static int to_i32(uint32_t v, const char *what, int32_t *out, guild_err_t *err)
{
    if (v > INT32_MAX)
        return guild_err_set(err, "CPU worker options: %s %u is out of range", what, v);
    *out = (int32_t)v;
    return 0;
}

int cpu_worker_options_from_proto(cpu_worker_options_t *o, const Guild__CpuWorkerOptions *m, guild_err_t *err)
{
    memset(o, 0, sizeof *o);
    if (to_i32(m->n_threads, "n_threads", &o->n_threads, err) < 0 ||
        to_i32(m->gate_up_rows, "gate_up_rows", &o->gate_up_rows, err) < 0 ||
        to_i32(m->down_rows, "down_rows", &o->down_rows, err) < 0)
        return -1;
    o->spin_ns = m->spin_ns;
    o->wait_slice_ns = m->wait_slice_ns;
    o->silence_ms = m->silence_ms;
    o->node = m->node;
    o->n_cpus = m->n_cpus;
    o->cpus = m->n_cpus ? m->cpus : NULL;
    o->mlock = m->mlock;
    o->data_endpoint = m->data_endpoint && m->data_endpoint[0] ? m->data_endpoint : NULL;
    o->interleave_gate_up = m->interleave_gate_up;
    if (m->expert_layout > EXPERT_LAYOUT_PACKED)
        return guild_err_set(err, "CPU worker options: expert layout %u is not one this worker knows (0 auto, "
                             "1 plain, 2 packed)", m->expert_layout);
    o->expert_layout = (expert_layout_t)m->expert_layout;
    return 0;
}

int cpu_worker_options_check(const cpu_worker_options_t *o, guild_err_t *err)
{
    if (o->n_threads < 0 || o->n_threads > 4096)
        return guild_err_set(err, "CPU worker options: n_threads %d (0..4096)", o->n_threads);
    if (o->gate_up_rows < 0 || o->gate_up_rows > MAX_ROWS || o->down_rows < 0 || o->down_rows > MAX_ROWS)
        return guild_err_set(err, "CPU worker options: row blocks gate/up %d, down %d (0..%d)", o->gate_up_rows,
                             o->down_rows, MAX_ROWS);
    if ((unsigned)o->expert_layout > EXPERT_LAYOUT_PACKED)
        return guild_err_set(err, "CPU worker options: expert layout %d is not one this worker knows (0 auto, "
                             "1 plain, 2 packed)", (int)o->expert_layout);
    if (o->node < -1 || (o->n_cpus && o->node < 0))
        return guild_err_set(err, "CPU worker options: node %d%s", o->node,
                             o->n_cpus ? " (CPUs given without their node)" : "");
    return 0;
}
