/* guild-stager — fills pinned staging rings with pieces of the model file for the GPU worker (see
 * ipc/stage_ring.h for the protocol, ipc/stage_server.h for the copy loop). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/gguf/gguf.h"
#include "core/util/log.h"
#include "ipc/actor.h"
#include "stager/stage_bench.h"
#include "stager/stager_options.h"
#include "ipc/stage_ring.h"
#include "ipc/stage_server.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

int main(int argc, char **argv)
{
    stager_options_t opt;
    guild_err_t err = {{0}};
    const int pr = stager_options_parse(&opt, argc, argv, &err);
    if (pr == 1)
        return 0;
    if (pr < 0 || stager_options_check(&opt, &err) < 0) {
        fprintf(stderr, "guild-stager: %s\n", err.msg);
        if (pr != -1) /* a malformed command line, not a bad value */
            stager_options_usage(stderr);
        return 2;
    }
    const char *model = opt.model;
    const int n_rings = opt.n_rings, threads = opt.threads;
    guild_log_init("stager", opt.verbose >= 2 ? GUILD_LOG_DEBUG : opt.verbose ? GUILD_LOG_INFO : GUILD_LOG_WARN);
    if (opt.bench)
        return stage_bench_run(model, threads, (int)opt.runs, (size_t)opt.slot_mib << 20, stdout, &err) < 0
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
    const void *src = NULL;
    size_t map_bytes = 0;
    gguf_t *g = NULL;
    stage_ring_t *ring[STAGER_MAX_RINGS] = {0};
    stage_server_t *server[STAGER_MAX_RINGS] = {0};
    actor_t *actor = NULL;
    guild_curve_t *curve = NULL;
    uint64_t t_start = guild_now_ns(), ring_bytes = 0;

    /* a GGUF model as the GPU worker maps it, whose offsets the copies name (core/gguf: a split model's parts
     * one after the other); any other file as its bytes */
    guild_err_t gerr = {{0}};
    if (gguf_new(&g, model, &gerr) == 0) {
        src = gguf_mapping(g);
        map_bytes = (size_t)gguf_file_size(g);
    } else {
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
        src = map;
    }
    for (int i = 0; i < n_rings; i++) {
        if (stage_ring_attach(&ring[i], opt.rings[i], &err) < 0 ||
            stage_server_start(&server[i], ring[i], src, map_bytes, threads, &err) < 0)
            goto out;
        guild_log(GUILD_LOG_INFO, "serving ring %s: %u slots of %zu bytes, %d threads, model %s (%zu bytes)",
                  opt.rings[i], stage_ring_n_slots(ring[i]), stage_ring_slot_bytes(ring[i]), threads, model,
                  map_bytes);
        ring_bytes += stage_ring_map_size(ring[i]);
    }
    if (opt.endpoint && guild_curve_load(&curve, &opt.curve, opt.endpoint, false, &err) < 0)
        goto out;
    if (opt.endpoint) {
        actor_config_t ac = {
            .role = GUILD__ROLE__ROLE_STAGER,
            .node = -1,
            .endpoint = opt.endpoint,
            .name = "stager",
            .silence_ms = 3000,
            .signalled = &g_stop,
            .curve = curve,
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
                if (actor_failed(actor)) {
                    guild_err_set(&err, "%s", why);
                    goto out;
                }
                guild_log(GUILD_LOG_INFO, "stopping: %s", why);
                break;
            }
            atomic_store(&actor_stats(actor)->exchanges, sum.requests);
            atomic_store(&actor_stats(actor)->busy_ns, sum.copy_ns);
            /* the rings come from the command line: an Assign that asks for these is acknowledged */
            Guild__Envelope *env = actor_take_assign(actor, 0);
            if (env) {
                const Guild__Assign *a = env->assign;
                stager_options_t asked;
                guild_err_t e = {{0}};
                if (a->options_case != GUILD__ASSIGN__OPTIONS_STAGER)
                    actor_error(actor, GUILD__ERROR_CODE__ERROR_PROTOCOL, false, a->generation,
                                "assign: the stager needs stager options");
                else if (stager_options_from_proto(&asked, a->stager, &e) < 0 ||
                         stager_options_match(&opt, &asked, &e) < 0)
                    actor_error(actor, GUILD__ERROR_CODE__ERROR_PROTOCOL, false, a->generation, "%s", e.msg);
                else
                    actor_ready(actor, a->generation, guild_now_ns() - t_start, ring_bytes, sum.requests);
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
    guild_curve_destroy(&curve);
    for (int i = 0; i < n_rings; i++) {
        if (server[i]) {
            stage_server_stats_t s;
            stage_server_stats(server[i], &s);
            guild_log(GUILD_LOG_INFO, "ring %s: %llu requests (%llu refused), %.3f GB copied", opt.rings[i],
                      (unsigned long long)s.requests, (unsigned long long)s.refused, (double)s.bytes / 1e9);
        }
        stage_server_stop(&server[i]);
        stage_ring_destroy(&ring[i]);
    }
    if (map != MAP_FAILED)
        munmap(map, map_bytes);
    gguf_destroy(&g);
    if (fd >= 0)
        close(fd);
    return rc;
}
