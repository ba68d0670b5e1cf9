/* tests/ipc_stress.c — the exchange protocol (step doorbell, per-worker done counters, slot ring) hammered
 * by one dense side and K workers, as processes (fork, the real deployment) or threads (for
 * ThreadSanitizer, which sees the release/acquire pairs and would flag a payload read that is not ordered
 * after its write).
 *
 * Every exchange carries a payload derived from its sequence number; workers check they see exactly the
 * exchange they wait for with its payload, write outputs derived from it, the dense side checks each output
 * row. A lost step (a worker skipping or missing an exchange), a duplicated or overrun one (a slot reused
 * before every worker finished, a done counter out of range), or an unordered payload all fail the run.
 * --racy writes the payload after ringing: a deliberate data race that TSan must report (the script checks
 * that the detector works).
 *
 * usage: ipc_stress [--threads] [--workers K] [--slots S] [--rounds N] [--seconds T] [--spin-ns NS] [--racy]
 * Exit 0 when every check passed; the rate is printed.
 */
#include "config.h"

#include "core/util/err.h"
#include "core/util/log.h"
#include "ipc/arena.h"
#include "ipc/doorbell.h"
#include "ipc/exchange.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { TOKENS = 2, EMBD = 4, USED = 2, EXPERTS = 8, MAX_WORKERS = 8 };

typedef struct stress {
    guild_arena_t *arena;
    char name[GUILD_ARENA_NAME_MAX];
    int workers, slots, racy;
    uint64_t rounds, seconds, spin_ns;
} stress_t;

typedef struct worker_arg {
    stress_t *st;
    guild_exchange_t *x;
    int k;
    int failed;
} worker_arg_t;

static float payload(uint64_t seq, int t, int i)
{
    return (float)((seq * 7 + (uint64_t)t * 3 + (uint64_t)i) & 0xffffff);
}

static int expert_of(uint64_t seq, int t, int j)
{
    return (int)((seq + (uint64_t)t * 5 + (uint64_t)j * 3) % EXPERTS);
}

static float output(uint64_t seq, int t, int j, int i)
{
    return payload(seq, t, i) + (float)(expert_of(seq, t, j) * 1000);
}

static int owner(int e, int workers)
{
    return e * workers / EXPERTS;
}

/* One worker: serves exchanges until the stop marker (layer -1). Returns the number of failed checks. */
static int worker_loop(stress_t *st, guild_exchange_t *x, int k)
{
    guild_wait_policy_t p = {st->spin_ns, 10000000000ull};
    guild_err_t err = {{0}};
    int failed = 0;
    for (uint64_t seq = 1;; seq++) {
        guild_exchange_slot_t s;
        if (guild_exchange_wait_step(x, seq, &p, &s, NULL, &err) != GUILD_WAIT_OK) {
            fprintf(stderr, "worker %d: %s\n", k, err.msg);
            return failed + 1;
        }
        uint64_t step = guild_exchange_step(x);
        if (step > seq + (uint64_t)st->slots - 1) {
            fprintf(stderr, "worker %d: step %llu while exchange %llu is not done: the ring was overrun\n", k,
                    (unsigned long long)step, (unsigned long long)seq);
            failed++;
        }
        if (s.layer == -1) {
            guild_exchange_complete(x, k, seq);
            return failed;
        }
        for (int t = 0; t < s.n_tokens; t++) {
            for (int i = 0; i < EMBD; i++)
                if (s.x[t * EMBD + i] != payload(seq, t, i) && failed++ < 5)
                    fprintf(stderr, "worker %d: exchange %llu: x[%d][%d] = %g, expected %g\n", k,
                            (unsigned long long)seq, t, i, (double)s.x[t * EMBD + i], (double)payload(seq, t, i));
            for (int j = 0; j < USED; j++) {
                int e = s.ids[t * USED + j];
                if (e != expert_of(seq, t, j)) {
                    if (failed++ < 5)
                        fprintf(stderr, "worker %d: exchange %llu: ids[%d][%d] = %d\n", k,
                                (unsigned long long)seq, t, j, e);
                    continue;
                }
                if (owner(e, st->workers) != k)
                    continue;
                for (int i = 0; i < EMBD; i++)
                    s.y[(t * USED + j) * EMBD + i] = s.x[t * EMBD + i] + (float)(e * 1000);
            }
        }
        guild_exchange_complete(x, k, seq);
    }
}

static void *worker_thread(void *arg)
{
    worker_arg_t *w = arg;
    w->failed = worker_loop(w->st, w->x, w->k);
    return NULL;
}

static void fill(guild_exchange_slot_t *s, uint64_t seq, int n_tokens)
{
    for (int t = 0; t < n_tokens; t++) {
        for (int i = 0; i < EMBD; i++)
            s->x[t * EMBD + i] = payload(seq, t, i);
        for (int j = 0; j < USED; j++)
            s->ids[t * USED + j] = expert_of(seq, t, j);
    }
}

/* Checks exchange c after every worker is done with it. */
static int collect(stress_t *st, guild_exchange_t *x, uint64_t c, uint64_t published)
{
    int failed = 0;
    guild_exchange_slot_t s;
    guild_exchange_view(x, c, &s);
    for (int t = 0; t < s.n_tokens; t++)
        for (int j = 0; j < USED; j++)
            for (int i = 0; i < EMBD; i++)
                if (s.y[(t * USED + j) * EMBD + i] != output(c, t, j, i) && failed++ < 5)
                    fprintf(stderr, "dense: exchange %llu: y[%d][%d][%d] = %g, expected %g (lost step?)\n",
                            (unsigned long long)c, t, j, i, (double)s.y[(t * USED + j) * EMBD + i],
                            (double)output(c, t, j, i));
    for (int k = 0; k < st->workers; k++) {
        uint64_t d = guild_exchange_done(x, k);
        if ((d < c || d > published) && failed++ < 5)
            fprintf(stderr, "dense: done[%d] = %llu outside [%llu, %llu]\n", k, (unsigned long long)d,
                    (unsigned long long)c, (unsigned long long)published);
    }
    return failed;
}

static int dense_loop(stress_t *st, guild_exchange_t *x, uint64_t *rounds_done)
{
    guild_wait_policy_t p = {st->spin_ns, 10000000000ull};
    guild_err_t err = {{0}};
    int failed = 0;
    uint64_t ahead = (uint64_t)st->slots - 1;
    uint64_t t0 = guild_now_ns(), deadline = t0 + st->seconds * 1000000000ull;
    uint64_t last = st->rounds; /* last real exchange; then one stop marker */
    for (uint64_t seq = 1; seq <= last + 1 + ahead; seq++) {
        if (seq <= last + 1) {
            guild_exchange_slot_t s;
            if (guild_exchange_begin(x, seq, &p, &s, NULL, &err) != GUILD_WAIT_OK) {
                fprintf(stderr, "dense: %s\n", err.msg);
                return failed + 1;
            }
            int stop = seq == last + 1;
            int n_tokens = stop ? 0 : 1 + (int)(seq % TOKENS);
            if (!st->racy)
                fill(&s, seq, n_tokens);
            if (guild_exchange_publish(x, seq, n_tokens, stop ? -1 : (int)(seq % 48), &err) < 0) {
                fprintf(stderr, "dense: %s\n", err.msg);
                return failed + 1;
            }
            if (st->racy)
                fill(&s, seq, n_tokens); /* the bug: inputs written after the doorbell */
            /* every 1024 exchanges, see whether the time is up; if so the next one is the stop marker */
            if (!stop && (seq & 1023) == 0 && guild_now_ns() > deadline)
                last = seq;
        }
        if (seq > ahead) {
            uint64_t c = seq - ahead;
            if (guild_exchange_wait_done(x, c, &p, NULL, &err) != GUILD_WAIT_OK) {
                fprintf(stderr, "dense: %s\n", err.msg);
                return failed + 1;
            }
            if (c <= last)
                failed += collect(st, x, c, seq <= last + 1 ? seq : last + 1);
        }
    }
    *rounds_done = last;
    return failed;
}

static guild_exchange_t *attach_exchange(const char *name)
{
    guild_err_t err = {{0}};
    guild_arena_t *a = guild_arena_attach(name, NULL, &err);
    if (!a) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    size_t size;
    void *r = guild_arena_region(a, GUILD_ARENA_KIND_EXCHANGE, 0, &size);
    guild_exchange_t *x = r ? guild_exchange_attach(r, size, &err) : NULL;
    if (!x)
        fprintf(stderr, "%s\n", err.msg);
    return x; /* the worker process keeps its arena mapping until it exits */
}

int main(int argc, char **argv)
{
    stress_t st = {.workers = 1, .slots = 1, .rounds = 1000000, .seconds = 20, .spin_ns = 50000};
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--threads"))
            threads = 1;
        else if (!strcmp(a, "--racy"))
            st.racy = 1;
        else if (!strcmp(a, "--workers") && v)
            st.workers = atoi(argv[++i]);
        else if (!strcmp(a, "--slots") && v)
            st.slots = atoi(argv[++i]);
        else if (!strcmp(a, "--rounds") && v)
            st.rounds = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--seconds") && v)
            st.seconds = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--spin-ns") && v)
            st.spin_ns = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--threads] [--workers K] [--slots S] [--rounds N] [--seconds T] "
                    "[--spin-ns NS] [--racy]\n", argv[0]);
            return 2;
        }
    }
    if (st.workers < 1 || st.workers > MAX_WORKERS || st.slots < 1 || st.slots > 16 || st.rounds < 1) {
        fprintf(stderr, "ipc_stress: workers must be 1..%d, slots 1..16, rounds >= 1\n", MAX_WORKERS);
        return 2;
    }
    guild_log_init("ipc_stress", GUILD_LOG_ERROR);
    guild_exchange_shape_t shape = {TOKENS, EMBD, USED, (uint32_t)st.slots, (uint32_t)st.workers, 0};
    guild_arena_request_t req = {GUILD_ARENA_KIND_EXCHANGE, 0, guild_exchange_memsize(&shape)};
    guild_arena_opts_t opts = {GUILD_ARENA_PAGES_SMALL, 0, NULL, 0, 0};
    guild_err_t err = {{0}};
    st.arena = guild_arena_create(&req, 1, &opts, &err);
    if (!st.arena) {
        fprintf(stderr, "ipc_stress: %s\n", err.msg);
        return 1;
    }
    size_t rsize;
    void *r = guild_arena_region(st.arena, GUILD_ARENA_KIND_EXCHANGE, 0, &rsize);
    if (guild_exchange_init(r, rsize, &shape, &err) < 0) {
        fprintf(stderr, "ipc_stress: %s\n", err.msg);
        return 1;
    }
    guild_arena_publish(st.arena);
    snprintf(st.name, sizeof st.name, "%s", guild_arena_name(st.arena));
    guild_exchange_t *x = guild_exchange_attach(r, rsize, &err);

    pid_t pids[MAX_WORKERS];
    pthread_t tids[MAX_WORKERS];
    worker_arg_t args[MAX_WORKERS];
    for (int k = 0; k < st.workers; k++) {
        if (threads) {
            args[k] = (worker_arg_t){&st, x, k, 0};
            pthread_create(&tids[k], NULL, worker_thread, &args[k]);
            continue;
        }
        pids[k] = fork();
        if (pids[k] < 0) {
            perror("fork");
            return 1;
        }
        if (pids[k] == 0) {
            guild_exchange_t *wx = attach_exchange(st.name);
            _exit(wx ? (worker_loop(&st, wx, k) ? 1 : 0) : 3);
        }
    }
    uint64_t t0 = guild_now_ns(), done = 0;
    int failed = dense_loop(&st, x, &done);
    double secs = (double)(guild_now_ns() - t0) / 1e9;
    for (int k = 0; k < st.workers; k++) {
        if (threads) {
            pthread_join(tids[k], NULL);
            failed += args[k].failed;
            continue;
        }
        int status;
        waitpid(pids[k], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "ipc_stress: worker %d failed (status 0x%x)\n", k, status);
            failed++;
        }
    }
    printf("ipc_stress: %s, %d worker(s), %d slot(s), spin %llu ns: %llu exchanges in %.2f s (%.0f round "
           "trips/s)%s; %s\n", threads ? "threads" : "processes", st.workers, st.slots,
           (unsigned long long)st.spin_ns, (unsigned long long)done, secs, (double)done / secs,
           done < st.rounds ? " (stopped at the time limit)" : "", failed ? "FAILED" : "all checks passed");
    guild_exchange_destroy(&x);
    guild_arena_destroy(&st.arena);
    return failed ? 1 : 0;
}
