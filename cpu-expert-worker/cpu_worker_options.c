#include "config.h"

#include "cpu-expert-worker/cpu_worker_options.h"

#include <getopt.h>
#include <stdint.h>
#include <string.h>

#include "core/util/cli.h"
#include "ipc/exchange_layout.h"

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
    m->n_share_with = o->n_share_with;
    m->share_with = (uint32_t *)o->share_with;
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
    o->n_share_with = m->n_share_with;
    o->share_with = m->n_share_with ? m->share_with : NULL;
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
    for (size_t i = 0; i < o->n_share_with; i++)
        if (o->share_with[i] >= GUILD_EXCHANGE_MAX_WORKERS || (i && o->share_with[i] <= o->share_with[i - 1]))
            return guild_err_set(err, "CPU worker options: share_with[%zu] = %u (worker indices ascending, below %d)",
                                 i, o->share_with[i], GUILD_EXCHANGE_MAX_WORKERS);
    if (o->node < -1 || (o->n_cpus && o->node < 0))
        return guild_err_set(err, "CPU worker options: node %d%s", o->node,
                             o->n_cpus ? " (CPUs given without their node)" : "");
    return 0;
}

void cpu_worker_args_usage(FILE *out)
{
    fprintf(out,
            "usage: guild-cpu-worker --node N --connect ENDPOINT [--no-shared-memory] [--model PATH]\n"
            "                        [--key FILE --server-key FILE | --insecure] [-v]\n"
            "\n"
            "Computes the routed experts of its shard for Guild's multi-process pipeline, with its memory and\n"
            "threads on NUMA node N. Started by `guild run` or `guild serve`, or by hand (e.g. one systemd unit per\n"
            "socket: guild-cpu-worker@N.service) for their --listen ENDPOINT; the shard, threads and arena come\n"
            "from the coordinator.\n"
            "\n"
            "  --node N             NUMA node to serve (default 0)\n"
            "  --connect ENDPOINT   the coordinator's control socket (ipc://PATH or tcp://HOST:PORT)\n"
            "  --no-shared-memory   do not map the coordinator's arena: exchanges travel as messages (what a\n"
            "                       worker on another host does; the coordinator needs --listen)\n"
            "  --model PATH         this host's copy of the model (the coordinator checks that the tensors of\n"
            "                       the shard are the same as in its own); without it, a worker that does not\n"
            "                       map the arena receives its shard from the coordinator\n"
            "  --key FILE           tcp: this worker's CURVE key pair (`guild keygen`)\n"
            "  --server-key FILE    tcp: the coordinator's public key (its .pub file); no other is talked to\n"
            "  --insecure           tcp without CURVE: no authentication, no encryption\n"
            "  -v, --verbose        more messages on stderr (-vv: debug)\n"
            "  -h, --help           this help\n");
}

int cpu_worker_args_parse(cpu_worker_args_t *a, int argc, char **argv, guild_err_t *err)
{
    static const struct option opts[] = {
        {"node", required_argument, NULL, 'n'},
        {"connect", required_argument, NULL, 'c'},
        {"no-shared-memory", no_argument, NULL, 'S'},
        {"model", required_argument, NULL, 'm'},
        {"key", required_argument, NULL, 'K'},
        {"server-key", required_argument, NULL, 'P'},
        {"insecure", no_argument, NULL, 'I'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    a->shared_memory = true;
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, "n:c:m:vh", opts, NULL)) != -1) {
        switch (o) {
        case 'n': {
            long v;
            if (cli_parse_long("--node", optarg, 0, 4095, &v, err) < 0)
                return -1;
            a->node = (int)v;
            break;
        }
        case 'c': a->endpoint = optarg; break;
        case 'S': a->shared_memory = false; break;
        case 'm': a->model = optarg; break;
        case 'K': a->curve.key = optarg; break;
        case 'P': a->curve.server_key = optarg; break;
        case 'I': a->curve.insecure = true; break;
        case 'v': a->verbose++; break;
        case 'h': cpu_worker_args_usage(stdout); return 1;
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
    return cpu_worker_args_check(a, err);
}

int cpu_worker_args_check(const cpu_worker_args_t *a, guild_err_t *err)
{
    if (!a->endpoint || !a->endpoint[0])
        return guild_err_set(err, "--connect ENDPOINT is required");
    if (a->model && !a->model[0])
        return guild_err_set(err, "--model: an empty path");
    return guild_curve_check(&a->curve, "--connect", a->endpoint, false, err);
}
