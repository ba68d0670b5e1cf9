/* bench/doorbell_bench.c — doorbell round-trip latency between two processes pinned to different CPUs.
 *
 * The initiator rings `ping` = s and waits for `pong` >= s; the responder waits for ping >= s and rings
 * pong = s. One round trip = two doorbell hand-offs (what a decode step pays per MoE layer: step out, done
 * back). Three wait modes: spin only; spin for --spin-ns then futex (the deployed setting); futex at once
 * (spin 0: the cost of a sleep/wake pair). Warm-up rounds excluded; each round timed with CLOCK_MONOTONIC
 * (the timer's own cost is measured and printed). Output: provenance lines ("# key: value"), then one line
 * per mode with median, p90, p99, p99.9, min, max and the futex sleeps of both sides.
 *
 * usage: doorbell_bench [--rounds N] [--warmup W] [--cpus A,B] [--spin-ns NS] [--modes spin,spin-futex,futex]
 */
#include "config.h"

#include "core/util/err.h"
#include "core/util/log.h"
#include "ipc/arena.h"
#include "ipc/doorbell.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_NS 10000000000ull /* a stalled peer ends the run with an error, not a hang */

typedef struct pair {
    guild_doorbell_t ping; /* rung by the initiator */
    guild_doorbell_t pong; /* rung by the responder */
    guild_wait_stats_t responder; /* written by the responder when it finishes */
    char pad[64 - sizeof(guild_wait_stats_t) % 64];
} pair_t;

typedef struct mode {
    const char *name;
    uint64_t spin_ns;
} bench_mode_t;

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint64_t pct(const uint64_t *sorted, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static void cpu_model(char *buf, size_t n)
{
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "re");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c += 1 + (c[1] == ' ');
                c[strcspn(c, "\n")] = '\0';
                snprintf(buf, n, "%s", c);
            }
            break;
        }
    if (f)
        fclose(f);
}

static void commit(char *buf, size_t n)
{
    snprintf(buf, n, "unknown (no git checkout at %s)", GUILD_SRCDIR);
    FILE *p = popen("git -C '" GUILD_SRCDIR "' describe --always --dirty --abbrev=12 2>/dev/null", "r");
    if (!p)
        return;
    char line[128];
    if (fgets(line, sizeof line, p) && line[0] != '\n') {
        line[strcspn(line, "\n")] = '\0';
        snprintf(buf, n, "%s", line);
    }
    pclose(p);
}

static void provenance(int argc, char **argv, int cpu_a, int cpu_b, const guild_arena_t *arena)
{
    char c[160], model[256], date[64];
    commit(c, sizeof c);
    cpu_model(model, sizeof model);
    time_t t = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    struct utsname u;
    uname(&u);
    printf("# benchmark: doorbell round trip between two processes (bench/doorbell_bench.c)\n");
    printf("# commit: %s\n", c);
    printf("# machine: %s; %ld online CPUs; host %s\n", model, sysconf(_SC_NPROCESSORS_ONLN), u.nodename);
    printf("# kernel: %s %s\n", u.sysname, u.release);
    printf("# date: %s\n", date);
    printf("# command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n# cpus: initiator %d, responder %d\n", cpu_a, cpu_b);
    printf("# arena: %s pages\n", guild_arena_pages_name(guild_arena_pages(arena)));
    double load[3] = {0};
    FILE *f = fopen("/proc/loadavg", "re");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = -1;
        fclose(f);
    }
    printf("# load average at start: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
}

/* Median cost of one CLOCK_MONOTONIC read, ns. */
static uint64_t timer_cost(void)
{
    enum { N = 10001 };
    static uint64_t d[N];
    for (int i = 0; i < N; i++) {
        uint64_t a = guild_now_ns();
        uint64_t b = guild_now_ns();
        d[i] = b - a;
    }
    qsort(d, N, sizeof d[0], cmp_u64);
    return d[N / 2];
}

static int run_mode(pair_t *p, const bench_mode_t *m, int cpu_a, int cpu_b, uint64_t warmup, uint64_t rounds,
                    uint64_t *samples)
{
    guild_doorbell_init(&p->ping);
    guild_doorbell_init(&p->pong);
    memset(&p->responder, 0, sizeof p->responder);
    guild_wait_policy_t policy = {m->spin_ns, TIMEOUT_NS};
    uint64_t total = warmup + rounds;
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        if (pin(cpu_b) < 0)
            fprintf(stderr, "doorbell_bench: cannot pin the responder to CPU %d: %s\n", cpu_b, strerror(errno));
        guild_wait_stats_t st = {0};
        guild_err_t err;
        for (uint64_t s = 1; s <= total; s++) {
            if (guild_doorbell_wait(&p->ping, s, &policy, NULL, &st, "ping", &err) != GUILD_WAIT_OK) {
                fprintf(stderr, "doorbell_bench: responder: %s\n", err.msg);
                _exit(1);
            }
            guild_doorbell_ring(&p->pong, s);
        }
        p->responder = st;
        _exit(0);
    }
    guild_wait_stats_t st = {0};
    guild_err_t err;
    int rc = 0;
    for (uint64_t s = 1; s <= total; s++) {
        uint64_t t0 = guild_now_ns();
        guild_doorbell_ring(&p->ping, s);
        if (guild_doorbell_wait(&p->pong, s, &policy, NULL, &st, "pong", &err) != GUILD_WAIT_OK) {
            fprintf(stderr, "doorbell_bench: initiator: %s\n", err.msg);
            rc = -1;
            break;
        }
        uint64_t t1 = guild_now_ns();
        if (s > warmup)
            samples[s - warmup - 1] = t1 - t0;
    }
    int status;
    waitpid(pid, &status, 0);
    if (rc < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    qsort(samples, rounds, sizeof samples[0], cmp_u64);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < rounds; i++)
        sum += samples[i];
    printf("%-11s spin_ns=%-11llu rounds=%llu median_ns=%llu p90_ns=%llu p99_ns=%llu p999_ns=%llu min_ns=%llu "
           "max_ns=%llu mean_ns=%.0f sleeps_initiator=%llu sleeps_responder=%llu\n",
           m->name, (unsigned long long)m->spin_ns, (unsigned long long)rounds,
           (unsigned long long)pct(samples, rounds, 0.5), (unsigned long long)pct(samples, rounds, 0.9),
           (unsigned long long)pct(samples, rounds, 0.99), (unsigned long long)pct(samples, rounds, 0.999),
           (unsigned long long)samples[0], (unsigned long long)samples[rounds - 1], (double)sum / (double)rounds,
           (unsigned long long)st.sleeps, (unsigned long long)p->responder.sleeps);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t rounds = 100000, warmup = 10000, spin_ns = 5000;
    int cpu_a = 0, cpu_b = 1;
    const char *modes = "spin,spin-futex,futex";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--rounds") && v)
            rounds = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--warmup") && v)
            warmup = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--spin-ns") && v)
            spin_ns = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cpus") && v && sscanf(argv[i + 1], "%d,%d", &cpu_a, &cpu_b) == 2)
            i++;
        else if (!strcmp(argv[i], "--modes") && v)
            modes = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--rounds N] [--warmup W] [--cpus A,B] [--spin-ns NS] "
                    "[--modes spin,spin-futex,futex]\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 1) {
        fprintf(stderr, "doorbell_bench: --rounds must be >= 1\n");
        return 2;
    }
    guild_log_init("doorbell_bench", GUILD_LOG_WARN);
    guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, sizeof(pair_t)};
    guild_err_t err = {{0}};
    guild_arena_t *arena = guild_arena_create(&req, 1, NULL, &err);
    if (!arena) {
        fprintf(stderr, "doorbell_bench: %s\n", err.msg);
        return 1;
    }
    guild_arena_publish(arena);
    pair_t *p = guild_arena_region(arena, GUILD_ARENA_KIND_TEST, 0, NULL);
    uint64_t *samples = malloc(rounds * sizeof *samples);
    if (!samples) {
        fprintf(stderr, "doorbell_bench: out of memory\n");
        return 1;
    }
    if (pin(cpu_a) < 0)
        fprintf(stderr, "doorbell_bench: cannot pin the initiator to CPU %d: %s\n", cpu_a, strerror(errno));
    provenance(argc, argv, cpu_a, cpu_b, arena);
    printf("# timer: one CLOCK_MONOTONIC read costs %llu ns (median); each round includes about one read\n",
           (unsigned long long)timer_cost());
    printf("# warm-up: %llu rounds per mode, excluded\n", (unsigned long long)warmup);
    const bench_mode_t all[] = {{"spin", TIMEOUT_NS}, {"spin-futex", spin_ns}, {"futex", 0}};
    int rc = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        /* exact item match in the comma-separated list */
        size_t len = strlen(all[i].name);
        const char *q = modes;
        int want = 0;
        while (q && *q) {
            if (!strncmp(q, all[i].name, len) && (q[len] == ',' || q[len] == '\0'))
                want = 1;
            q = strchr(q, ',');
            q = q ? q + 1 : NULL;
        }
        if (want && run_mode(p, &all[i], cpu_a, cpu_b, warmup, rounds, samples) < 0)
            rc = 1;
    }
    free(samples);
    guild_arena_destroy(&arena);
    return rc;
}
