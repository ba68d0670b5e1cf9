#include "config.h"

#include "stager/stager_options.h"

#include <getopt.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "core/util/cli.h"

void stager_options_usage(FILE *out)
{
    fprintf(out,
            "usage: guild-stager -m MODEL --ring NAME [--ring NAME ...] [--threads K] [--connect ENDPOINT] [-v]\n"
            "                    [--key FILE --server-key FILE | --insecure]\n"
            "       guild-stager -m MODEL --bench [--threads K] [--runs N] [--slot-mib S]\n"
            "\n"
            "Copies pieces of the model file into pinned staging rings (shared memory created by the GPU worker\n"
            "or the coordinator) so that the GPU copies expert weights from page-locked memory. Started by the\n"
            "coordinator with the rings it created; serves until a ring owner asks it to stop, its parent\n"
            "goes away, SIGTERM/SIGINT, or (with --connect) a Shutdown or the coordinator's silence.\n"
            "\n"
            "  -m, --model PATH     the model file to serve (mapped read-only)\n"
            "  --ring NAME          a ring's arena: /proc/PID/fd/FD, a file path, or fd:N for an inherited fd\n"
            "  --threads K          copy threads per ring (default: the CPUs this process may run on)\n"
            "  --connect ENDPOINT   the coordinator's control socket (ipc://PATH or tcp://HOST:PORT): register as\n"
            "                       the stager, answer heartbeats (with the requests served), Ready to an Assign\n"
            "  --key FILE           tcp: this stager's CURVE key pair (`guild keygen`)\n"
            "  --server-key FILE    tcp: the coordinator's public key (its .pub file)\n"
            "  --insecure           tcp without CURVE: no authentication, no encryption\n"
            "  --bench              measure the fill rate of the model's expert tensors instead of serving\n"
            "  --runs N             bench: runs per measurement (median reported; default 5)\n"
            "  --slot-mib S         bench: slot size in MiB (default 64)\n"
            "  -v, --verbose        more messages on stderr (-vv: debug)\n"
            "  -h, --help           this help\n");
}

static int default_threads(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

int stager_options_parse(stager_options_t *o, int argc, char **argv, guild_err_t *err)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"ring", required_argument, NULL, 'r'},
        {"threads", required_argument, NULL, 't'},
        {"connect", required_argument, NULL, 'c'},
        {"key", required_argument, NULL, 'K'},
        {"server-key", required_argument, NULL, 'P'},
        {"insecure", no_argument, NULL, 'I'},
        {"bench", no_argument, NULL, 'B'},
        {"runs", required_argument, NULL, 'R'},
        {"slot-mib", required_argument, NULL, 'S'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->threads = default_threads();
    o->runs = 5;
    o->slot_mib = 64;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "m:vh", opts, NULL)) != -1) {
        long v;
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'r': {
            if (o->n_rings == STAGER_MAX_RINGS)
                return guild_err_set(err, "at most %d --ring", STAGER_MAX_RINGS);
            char *name = o->rings[o->n_rings++];
            if (!strncmp(optarg, "fd:", 3)) {
                if (cli_parse_long("--ring fd:", optarg + 3, 0, 1 << 20, &v, err) < 0)
                    return -1;
                snprintf(name, STAGER_RING_NAME_MAX, "/proc/self/fd/%ld", v);
            } else if ((size_t)snprintf(name, STAGER_RING_NAME_MAX, "%s", optarg) >= STAGER_RING_NAME_MAX) {
                return guild_err_set(err, "--ring name too long: %s", optarg);
            }
            break;
        }
        case 't':
            if (cli_parse_long("--threads", optarg, 1, 256, &v, err) < 0)
                return -1;
            o->threads = (int32_t)v;
            break;
        case 'c': o->endpoint = optarg; break;
        case 'K': o->curve.key = optarg; break;
        case 'P': o->curve.server_key = optarg; break;
        case 'I': o->curve.insecure = true; break;
        case 'B': o->bench = true; break;
        case 'R':
            if (cli_parse_long("--runs", optarg, 1, 1000, &v, err) < 0)
                return -1;
            o->runs = (int32_t)v;
            break;
        case 'S':
            if (cli_parse_long("--slot-mib", optarg, 1, 65536, &v, err) < 0)
                return -1;
            o->slot_mib = (int32_t)v;
            break;
        case 'v': o->verbose++; break;
        case 'h': stager_options_usage(stdout); return 1;
        default:
            guild_err_set(err, "unknown option or missing value: %s", argv[optind - 1]);
            return -2;
        }
    }
    if (optind < argc) {
        guild_err_set(err, "unexpected argument");
        return -2;
    }
    return 0;
}

void stager_options_to_proto(const stager_options_t *o, Guild__StagerOptions *m, char **names)
{
    guild__stager_options__init(m);
    for (int i = 0; i < o->n_rings; i++)
        names[i] = (char *)o->rings[i];
    m->n_rings = (size_t)o->n_rings;
    m->rings = o->n_rings ? names : NULL;
    m->threads = (uint32_t)o->threads;
}

int stager_options_from_proto(stager_options_t *o, const Guild__StagerOptions *m, guild_err_t *err)
{
    memset(o, 0, sizeof *o);
    if (m->n_rings > STAGER_MAX_RINGS)
        return guild_err_set(err, "stager options: %zu rings, at most %d", m->n_rings, STAGER_MAX_RINGS);
    for (size_t i = 0; i < m->n_rings; i++)
        if ((size_t)snprintf(o->rings[i], STAGER_RING_NAME_MAX, "%s", m->rings[i] ? m->rings[i] : "") >=
            STAGER_RING_NAME_MAX)
            return guild_err_set(err, "stager options: ring name too long: %s", m->rings[i]);
    o->n_rings = (int)m->n_rings;
    if (m->threads > INT32_MAX)
        return guild_err_set(err, "stager options: threads %u is out of range", m->threads);
    o->threads = (int32_t)m->threads;
    return 0;
}

int stager_options_check(const stager_options_t *o, guild_err_t *err)
{
    if (!o->model)
        return guild_err_set(err, "-m MODEL is required");
    if (!o->bench && o->n_rings == 0)
        return guild_err_set(err, "at least one --ring NAME is required");
    if (o->threads < 1 || o->threads > 256)
        return guild_err_set(err, "--threads %d: expected 1..256", o->threads);
    return guild_curve_check(&o->curve, "--connect", o->endpoint, false, err);
}

int stager_options_match(const stager_options_t *o, const stager_options_t *a, guild_err_t *err)
{
    if (a->threads != o->threads)
        return guild_err_set(err, "assign: %d copy threads asked, this stager runs %d", a->threads, o->threads);
    if (a->n_rings != o->n_rings)
        return guild_err_set(err, "assign: %d rings asked, this stager serves %d", a->n_rings, o->n_rings);
    for (int i = 0; i < o->n_rings; i++)
        if (strcmp(a->rings[i], o->rings[i]) != 0)
            return guild_err_set(err, "assign: ring %s asked, this stager serves %s", a->rings[i], o->rings[i]);
    return 0;
}
