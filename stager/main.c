/* guild-stager — fills pinned staging rings with pieces of the model file for the GPU worker (see
 * ipc/stage_ring.h for the protocol, ipc/stage_server.h for the copy loop). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/cli.h"
#include "core/util/log.h"
#include "ipc/actor.h"
#include "stager/stage_bench.h"
#include "ipc/stage_ring.h"
#include "ipc/stage_server.h"

#define MAX_RINGS 8

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild-stager -m MODEL --ring NAME [--ring NAME ...] [--threads K] [--connect ENDPOINT] [-v]\n"
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

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"ring", required_argument, NULL, 'r'},
        {"threads", required_argument, NULL, 't'},
        {"connect", required_argument, NULL, 'c'},
        {"bench", no_argument, NULL, 'B'},
        {"runs", required_argument, NULL, 'R'},
        {"slot-mib", required_argument, NULL, 'S'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *model = NULL, *endpoint = NULL;
    char rings[MAX_RINGS][64 + 256];
    int n_rings = 0, threads = default_threads(), verbose = 0, bench = 0, o;
    long runs = 5, slot_mib = 64;
    guild_err_t err = {{0}};
    opterr = 0;
    while ((o = getopt_long(argc, argv, "m:vh", opts, NULL)) != -1) {
        long v;
        switch (o) {
        case 'm': model = optarg; break;
        case 'r':
            if (n_rings == MAX_RINGS) {
                fprintf(stderr, "guild-stager: at most %d --ring\n", MAX_RINGS);
                return 2;
            }
            if (!strncmp(optarg, "fd:", 3)) {
                if (cli_parse_long("--ring fd:", optarg + 3, 0, 1 << 20, &v, &err) < 0)
                    goto bad;
                snprintf(rings[n_rings++], sizeof rings[0], "/proc/self/fd/%ld", v);
            } else if ((size_t)snprintf(rings[n_rings++], sizeof rings[0], "%s", optarg) >= sizeof rings[0]) {
                fprintf(stderr, "guild-stager: --ring name too long: %s\n", optarg);
                return 2;
            }
            break;
        case 't':
            if (cli_parse_long("--threads", optarg, 1, 256, &v, &err) < 0)
                goto bad;
            threads = (int)v;
            break;
        case 'c': endpoint = optarg; break;
        case 'B': bench = 1; break;
        case 'R':
            if (cli_parse_long("--runs", optarg, 1, 1000, &runs, &err) < 0)
                goto bad;
            break;
        case 'S':
            if (cli_parse_long("--slot-mib", optarg, 1, 65536, &slot_mib, &err) < 0)
                goto bad;
            break;
        case 'v': verbose++; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "guild-stager: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !model || (!bench && n_rings == 0)) {
        fprintf(stderr, "guild-stager: %s\n", optind < argc ? "unexpected argument"
                                              : !model     ? "-m MODEL is required"
                                                           : "at least one --ring NAME is required");
        usage(stderr);
        return 2;
    }
    guild_log_init("stager", verbose >= 2 ? GUILD_LOG_DEBUG : verbose ? GUILD_LOG_INFO : GUILD_LOG_WARN);
    if (bench)
        return stage_bench_run(model, threads, (int)runs, (size_t)slot_mib << 20, stdout, &err) < 0
                   ? (fprintf(stderr, "guild-stager: %s\n", err.msg), 1)
                   : 0;

    /* a stager is useless without the process that started it: stop with it */
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    int rc = 1, fd = -1;
    void *map = MAP_FAILED;
    size_t map_bytes = 0;
    stage_ring_t *ring[MAX_RINGS] = {0};
    stage_server_t *server[MAX_RINGS] = {0};
    actor_t *actor = NULL;
    uint64_t t_start = guild_now_ns(), ring_bytes = 0;

    fd = open(model, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        guild_err_errno(&err, errno, "%s: open", model);
        goto out;
    }
    map_bytes = (size_t)st.st_size;
    if (map_bytes == 0) {
        guild_err_set(&err, "%s: empty file", model);
        goto out;
    }
    map = mmap(NULL, map_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        guild_err_errno(&err, errno, "%s: mmap of %zu bytes", model, map_bytes);
        goto out;
    }
    for (int i = 0; i < n_rings; i++) {
        if (stage_ring_attach(&ring[i], rings[i], &err) < 0 ||
            stage_server_start(&server[i], ring[i], map, map_bytes, threads, &err) < 0)
            goto out;
        guild_log(GUILD_LOG_INFO, "serving ring %s: %u slots of %zu bytes, %d threads, model %s (%zu bytes)",
                  rings[i], stage_ring_n_slots(ring[i]), stage_ring_slot_bytes(ring[i]), threads, model,
                  map_bytes);
        ring_bytes += stage_ring_map_size(ring[i]);
    }
    if (endpoint) {
        actor_config_t ac = {
            .role = GUILD__ROLE__ROLE_STAGER,
            .node = -1,
            .endpoint = endpoint,
            .name = "stager",
            .silence_ms = 3000,
            .signalled = &g_stop,
        };
        if (actor_new(&actor, &ac, &err) < 0)
            goto out;
        atomic_store(&actor_stats(actor)->resident_bytes, ring_bytes);
    }
    for (;;) {
        int live = 0;
        stage_server_stats_t sum = {0};
        for (int i = 0; i < n_rings; i++) {
            stage_server_stats_t s;
            live += stage_server_running(server[i]);
            stage_server_stats(server[i], &s);
            sum.requests += s.requests;
            sum.copy_ns += s.copy_ns;
        }
        if (!live || g_stop)
            break;
        if (actor) {
            const char *why = "";
            if (actor_stopping(actor, &why)) {
                guild_log(GUILD_LOG_INFO, "stopping: %s", why);
                break;
            }
            atomic_store(&actor_stats(actor)->exchanges, sum.requests);
            atomic_store(&actor_stats(actor)->busy_ns, sum.copy_ns);
            /* the rings come from the command line: an Assign is acknowledged as it stands */
            Guild__Envelope *env = actor_take_assign(actor, 0);
            if (env) {
                actor_ready(actor, env->assign->generation, guild_now_ns() - t_start, ring_bytes, sum.requests);
                guild_msg_free(&env);
            }
        }
        if (getppid() != parent) {
            guild_log(GUILD_LOG_WARN, "parent process %d is gone; stopping", (int)parent);
            break;
        }
        usleep(20000);
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "guild-stager: %s\n", err.msg);
    actor_destroy(&actor);
    for (int i = 0; i < n_rings; i++) {
        if (server[i]) {
            stage_server_stats_t s;
            stage_server_stats(server[i], &s);
            guild_log(GUILD_LOG_INFO, "ring %s: %llu requests (%llu refused), %.3f GB copied", rings[i],
                      (unsigned long long)s.requests, (unsigned long long)s.refused, (double)s.bytes / 1e9);
        }
        stage_server_stop(&server[i]);
        stage_ring_destroy(&ring[i]);
    }
    if (map != MAP_FAILED)
        munmap(map, map_bytes);
    if (fd >= 0)
        close(fd);
    return rc;

bad:
    fprintf(stderr, "guild-stager: %s\n", err.msg);
    return 2;
}
