#include "config.h"

#include "ipc/actor.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "core/topo/topo.h"
#include "core/util/log.h"
#include "ipc/doorbell.h"

#define POLL_MS 20 /* control loop tick: bounds how late a stop or a forwarded message is noticed */
#define REGISTER_EVERY_NS 1000000000u /* until the first Assign: a refused worker (no place yet) tries again */
#define HANDSHAKE_TRIES 3 /* failed handshakes in a row (none succeeded between) that stop the worker */

struct actor {
    actor_config_t cfg;
    char identity[64];
    void *zctx;
    void *dealer;   /* control thread only */
    void *monitor;  /* control thread only: the dealer's handshake events (tcp endpoints); NULL: none */
    int hs_failed;  /* control thread: handshakes failed in a row */
    bool hs_ok;     /* control thread: a handshake succeeded once */
    _Atomic int failed; /* stopped by an error */
    void *pair_ctl; /* control thread's end of the inproc pair */
    void *pair_wrk; /* worker thread's end: Ready/Error to forward */
    pthread_t thread;
    bool thread_started;
    actor_stats_t stats;
    _Atomic uint32_t silence_ms;
    _Atomic int stop;

    pthread_mutex_t mu;
    pthread_cond_t cond;
    Guild__Envelope *assign; /* under mu: the latest Assign not yet taken */
    _Atomic int assign_pending;
    bool assigned;           /* control thread: an Assign has come */
    int coordinator_errors;  /* control thread: Errors received (the first is a warning, repeats are info) */
    char reason[256];        /* under mu: why stopping */
    uint64_t *routing;       /* under mu: the latest routing counts (actor_set_routing), [n_routing] */
    size_t n_routing;
    uint64_t msg_id;         /* worker thread's counter for forwarded messages */
};

static void set_stop(actor_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_stop(actor_t *a, const char *fmt, ...)
{
    pthread_mutex_lock(&a->mu);
    if (!atomic_load(&a->stop)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->reason, sizeof a->reason, fmt, ap);
        va_end(ap);
        atomic_store(&a->stop, 1);
    }
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->mu);
}

/* Stops on an error: the worker exits with a failure status. */
static void set_failed(actor_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_failed(actor_t *a, const char *fmt, ...)
{
    char msg[sizeof a->reason];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!atomic_load(&a->stop))
        atomic_store(&a->failed, 1);
    set_stop(a, "%s", msg);
}

/* The dealer's handshake events: a refusal or an impossible handshake stops the worker with the reason and the
 * fix (ZeroMQ alone would retry forever, silently). */
static void handshakes(actor_t *a)
{
    const char *ep = a->cfg.endpoint;
    const bool insecure = !a->cfg.curve || a->cfg.curve->insecure;
    guild_msg_handshake_t h;
    uint32_t v;
    while ((h = guild_msg_monitor_read(a->monitor, &v)) != GUILD_MSG_HS_NONE) {
        switch (h) {
        case GUILD_MSG_HS_OK:
            if (!a->hs_ok)
                guild_log(GUILD_LOG_INFO, "connected to %s%s", ep, insecure ? " (plain tcp: --insecure)" : " (CURVE)");
            a->hs_ok = true;
            a->hs_failed = 0;
            break;
        case GUILD_MSG_HS_REFUSED:
            set_failed(a, "the coordinator at %s refused this worker's key (status %u): the public key of %s must be "
                       "in the coordinator's --allow file", ep, v, a->cfg.curve ? a->cfg.curve->key_path : "--key");
            return;
        case GUILD_MSG_HS_MISMATCH:
            if (insecure)
                set_failed(a, "the coordinator at %s requires CURVE: this worker runs with --insecure; give it --key "
                           "(its key pair) and --server-key (the coordinator's public key)", ep);
            else
                set_failed(a, "the coordinator at %s does not use CURVE (was it started with --insecure?); this "
                           "worker only talks CURVE with the key of --server-key", ep);
            return;
        case GUILD_MSG_HS_FAILED:
            if (++a->hs_failed >= HANDSHAKE_TRIES) {
                if (insecure)
                    set_failed(a, "no handshake with the coordinator at %s after %d tries (error %u): does it "
                               "require CURVE keys? This worker runs with --insecure", ep, HANDSHAKE_TRIES, v);
                else
                    set_failed(a, "no CURVE handshake with the coordinator at %s after %d tries (error %u): is "
                               "--server-key the public key of the coordinator's --key?", ep, HANDSHAKE_TRIES, v);
                return;
            }
            break;
        default: break;
        }
    }
}

static void fill_stats(actor_t *a, Guild__Stats *s)
{
    s->exchanges = atomic_load(&a->stats.exchanges);
    s->tokens = atomic_load(&a->stats.tokens);
    s->busy_ns = atomic_load(&a->stats.busy_ns);
    s->wait_ns = atomic_load(&a->stats.wait_ns);
    s->futex_sleeps = atomic_load(&a->stats.futex_sleeps);
    s->last_seq = atomic_load(&a->stats.last_seq);
    s->rss_bytes = atomic_load(&a->stats.resident_bytes);
    s->streamed_layers = atomic_load(&a->stats.streamed_layers);
    s->streamed_bytes = atomic_load(&a->stats.streamed_bytes);
    s->split_gpu_experts = atomic_load(&a->stats.split_gpu_experts);
    s->split_cpu_experts = atomic_load(&a->stats.split_cpu_experts);
    s->split_gpu_pairs = atomic_load(&a->stats.split_gpu_pairs);
    s->split_cpu_pairs = atomic_load(&a->stats.split_cpu_pairs);
    s->staged_bytes = atomic_load(&a->stats.staged_bytes);
    s->stage_wait_ns = atomic_load(&a->stats.stage_wait_ns);
    s->routed_pairs = atomic_load(&a->stats.routed_pairs);
    s->resident_pairs = atomic_load(&a->stats.resident_pairs);
    s->stream_passes = atomic_load(&a->stats.stream_passes);
    s->stream_span_ns = atomic_load(&a->stats.stream_span_ns);
    s->copy_busy_ns = atomic_load(&a->stats.copy_busy_ns);
    s->copy_wait_ns = atomic_load(&a->stats.copy_wait_ns);
    s->cpu_wait_ns = atomic_load(&a->stats.cpu_wait_ns);
    s->hint_experts = atomic_load(&a->stats.hint_experts);
    s->hint_hits = atomic_load(&a->stats.hint_hits);
    s->prefetch_bytes = atomic_load(&a->stats.prefetch_bytes);
    s->prefetch_layers = atomic_load(&a->stats.prefetch_layers);
    s->turnaround_ns = atomic_load(&a->stats.turnaround_ns);
    s->turnarounds = atomic_load(&a->stats.turnarounds);
}

static void send_or_log(actor_t *a, Guild__Envelope *env)
{
    guild_err_t err = {{0}};
    if (guild_msg_send(a->dealer, NULL, env, &err) < 0)
        guild_log(GUILD_LOG_WARN, "to the coordinator: %s", err.msg);
}

static void send_register(actor_t *a)
{
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Register r = GUILD__REGISTER__INIT;
    Guild__Capabilities caps = GUILD__CAPABILITIES__INIT;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        caps.n_cpus = (uint32_t)CPU_COUNT(&set);
    caps.numa_nodes = topo_node_count();
    caps.shared_memory = !a->cfg.no_shared_memory;
    r.role = a->cfg.role;
    r.node = a->cfg.node;
    r.pid = (int32_t)getpid();
    r.hostname = host;
    r.capabilities = &caps;
    r.protocol_version = GUILD_PROTOCOL_VERSION;
    r.build = (char *)PACKAGE_STRING;
    env.body_case = GUILD__ENVELOPE__BODY_REGISTER_WORKER;
    env.register_worker = &r;
    send_or_log(a, &env);
}

static void handle(actor_t *a, Guild__Envelope *env)
{
    switch (env->body_case) {
    case GUILD__ENVELOPE__BODY_HEARTBEAT: {
        Guild__Envelope rep = GUILD__ENVELOPE__INIT;
        Guild__Heartbeat hb = GUILD__HEARTBEAT__INIT;
        Guild__Stats st = GUILD__STATS__INIT;
        fill_stats(a, &st);
        hb.seq = env->heartbeat->seq;
        hb.sent_ns = env->heartbeat->sent_ns; /* echoed: the coordinator measures the round trip */
        hb.stats = &st;
        rep.body_case = GUILD__ENVELOPE__BODY_HEARTBEAT;
        rep.heartbeat = &hb;
        send_or_log(a, &rep);
        break;
    }
    case GUILD__ENVELOPE__BODY_STATS_REQUEST: {
        Guild__Envelope rep = GUILD__ENVELOPE__INIT;
        Guild__Stats st = GUILD__STATS__INIT;
        fill_stats(a, &st);
        /* the routing counts, copied under the lock (the worker thread replaces them) */
        uint64_t *routing = NULL;
        pthread_mutex_lock(&a->mu);
        if (a->n_routing && (routing = malloc(a->n_routing * sizeof *routing))) {
            memcpy(routing, a->routing, a->n_routing * sizeof *routing);
            st.n_routing = a->n_routing;
            st.routing = routing;
        }
        pthread_mutex_unlock(&a->mu);
        rep.body_case = GUILD__ENVELOPE__BODY_STATS;
        rep.stats = &st;
        send_or_log(a, &rep);
        free(routing);
        break;
    }
    case GUILD__ENVELOPE__BODY_ASSIGN:
        a->assigned = true;
        pthread_mutex_lock(&a->mu);
        guild_msg_free(&a->assign); /* a newer one replaces one not yet taken */
        a->assign = env;
        atomic_store(&a->assign_pending, 1);
        pthread_cond_broadcast(&a->cond);
        pthread_mutex_unlock(&a->mu);
        return; /* ownership moved */
    case GUILD__ENVELOPE__BODY_SHUTDOWN:
        set_stop(a, "shutdown: %s", env->shutdown->reason && env->shutdown->reason[0] ? env->shutdown->reason
                                                                                       : "asked by the coordinator");
        break;
    case GUILD__ENVELOPE__BODY_ERROR:
        guild_log(a->coordinator_errors++ ? GUILD_LOG_INFO : GUILD_LOG_WARN, "the coordinator reports: %s",
                  env->error->message ? env->error->message : "");
        break;
    default: {
        char msg[128];
        snprintf(msg, sizeof msg, "unexpected %s message for a worker", guild_msg_body_name(env));
        guild_log(GUILD_LOG_WARN, "%s", msg);
        guild_err_t err = {{0}};
        if (guild_msg_send_error(a->dealer, NULL, GUILD__ERROR_CODE__ERROR_PROTOCOL, 0, msg, &err) < 0)
            guild_log(GUILD_LOG_WARN, "to the coordinator: %s", err.msg);
        break;
    }
    }
    guild_msg_free(&env);
}

static void *control_main(void *arg)
{
    actor_t *a = arg;
    uint64_t last_heard = 0; /* 0: never */
    send_register(a);
    uint64_t last_register = guild_now_ns();
    while (!atomic_load(&a->stop)) {
        zmq_pollitem_t items[3] = {{a->dealer, 0, ZMQ_POLLIN, 0}, {a->pair_ctl, 0, ZMQ_POLLIN, 0},
                                   {a->monitor, 0, ZMQ_POLLIN, 0}};
        int n = zmq_poll(items, a->monitor ? 3 : 2, POLL_MS);
        if (n < 0 && zmq_errno() != EINTR) {
            set_failed(a, "control socket: %s", zmq_strerror(zmq_errno()));
            break;
        }
        if (a->monitor) {
            handshakes(a);
            if (atomic_load(&a->stop))
                break;
        }
        guild_err_t err = {{0}};
        Guild__Envelope *env = NULL;
        /* every message waiting, so a burst of garbage cannot starve the heartbeat answers */
        for (;;) {
            guild_msg_result_t r = guild_msg_recv(a->dealer, 0, NULL, &env, &err);
            if (r == GUILD_MSG_TIMEOUT)
                break;
            if (r == GUILD_MSG_ERROR) {
                set_failed(a, "control socket: %s", err.msg);
                break;
            }
            last_heard = guild_now_ns();
            if (r == GUILD_MSG_BAD) {
                guild_log(GUILD_LOG_WARN, "bad message from the coordinator: %s", err.msg);
                char msg[GUILD_ERR_MAX + 32];
                snprintf(msg, sizeof msg, "bad message: %s", err.msg);
                guild_err_t e2 = {{0}};
                if (guild_msg_send_error(a->dealer, NULL, GUILD__ERROR_CODE__ERROR_PROTOCOL, 0, msg, &e2) < 0)
                    guild_log(GUILD_LOG_WARN, "to the coordinator: %s", e2.msg);
                continue;
            }
            handle(a, env);
        }
        for (;;) {
            guild_msg_result_t r = guild_msg_recv(a->pair_ctl, 0, NULL, &env, &err);
            if (r != GUILD_MSG_OK)
                break;
            send_or_log(a, env);
            guild_msg_free(&env);
        }
        if (a->cfg.signalled && *a->cfg.signalled)
            set_stop(a, "terminated by a signal");
        if (!a->assigned && guild_now_ns() - last_register > REGISTER_EVERY_NS) {
            send_register(a);
            last_register = guild_now_ns();
        }
        uint32_t silence = atomic_load(&a->silence_ms);
        if (last_heard && silence && guild_now_ns() - last_heard > (uint64_t)silence * 1000000u)
            set_stop(a, "the coordinator has been silent for %u ms", silence);
    }
    return NULL;
}

int actor_new(actor_t **out, const actor_config_t *cfg, guild_err_t *err)
{
    *out = NULL;
    actor_t *a = calloc(1, sizeof *a);
    if (!a)
        return guild_err_set(err, "actor: out of memory");
    a->cfg = *cfg;
    atomic_init(&a->silence_ms, cfg->silence_ms);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cond, NULL);
    snprintf(a->identity, sizeof a->identity, "%s-%d", cfg->name, (int)getpid());
    char inproc[96];
    snprintf(inproc, sizeof inproc, "inproc://actor-%p", (void *)a);
    if (!(a->zctx = zmq_ctx_new())) {
        guild_err_set(err, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    const bool tcp = guild_curve_endpoint_is_tcp(cfg->endpoint);
    const guild_msg_socket_opts_t so = {
        .max_bytes = GUILD_MSG_CONTROL_MAX_BYTES,
        .curve = cfg->curve,
        .monitor = tcp ? &a->monitor : NULL,
    };
    if (!(a->dealer = guild_msg_socket_new(a->zctx, false, cfg->endpoint, a->identity, &so, err)))
        goto fail;
    int linger = 0;
    if (!(a->pair_ctl = zmq_socket(a->zctx, ZMQ_PAIR)) || !(a->pair_wrk = zmq_socket(a->zctx, ZMQ_PAIR)) ||
        zmq_setsockopt(a->pair_ctl, ZMQ_LINGER, &linger, sizeof linger) < 0 ||
        zmq_setsockopt(a->pair_wrk, ZMQ_LINGER, &linger, sizeof linger) < 0 || zmq_bind(a->pair_ctl, inproc) < 0 ||
        zmq_connect(a->pair_wrk, inproc) < 0) {
        guild_err_set(err, "actor: inproc pair: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    int e = pthread_create(&a->thread, NULL, control_main, a);
    if (e) {
        guild_err_errno(err, e, "actor: cannot start the control thread");
        goto fail;
    }
    a->thread_started = true;
    *out = a;
    return 0;
fail:
    actor_destroy(&a);
    return -1;
}

void actor_destroy(actor_t **pa)
{
    actor_t *a = *pa;
    if (!a)
        return;
    if (a->thread_started) {
        set_stop(a, "worker exiting");
        pthread_join(a->thread, NULL);
    }
    if (a->pair_wrk)
        zmq_close(a->pair_wrk);
    if (a->pair_ctl)
        zmq_close(a->pair_ctl);
    guild_msg_close(&a->dealer);
    guild_msg_close(&a->monitor);
    if (a->zctx)
        zmq_ctx_term(a->zctx);
    guild_msg_free(&a->assign);
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->mu);
    free(a->routing);
    free(a);
    *pa = NULL;
}

Guild__Envelope *actor_take_assign(actor_t *a, int timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    if (timeout_ms >= 0) {
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
    }
    Guild__Envelope *env = NULL;
    pthread_mutex_lock(&a->mu);
    while (!a->assign && !atomic_load(&a->stop)) {
        if (timeout_ms < 0)
            pthread_cond_wait(&a->cond, &a->mu);
        else if (pthread_cond_timedwait(&a->cond, &a->mu, &dl) == ETIMEDOUT)
            break;
    }
    if (!atomic_load(&a->stop) && a->assign) {
        env = a->assign;
        a->assign = NULL;
        atomic_store(&a->assign_pending, 0);
    }
    pthread_mutex_unlock(&a->mu);
    return env;
}

bool actor_assign_pending(const actor_t *a)
{
    return atomic_load(&a->assign_pending) != 0;
}

bool actor_stopping(const actor_t *a, const char **reason)
{
    bool s = atomic_load(&a->stop) != 0;
    if (reason)
        *reason = s ? a->reason : ""; /* written once, before stop was set */
    return s;
}

bool actor_failed(const actor_t *a)
{
    return atomic_load(&a->failed) != 0;
}

void actor_stop(actor_t *a, const char *reason)
{
    set_stop(a, "%s", reason);
}

static void forward(actor_t *a, Guild__Envelope *env)
{
    guild_err_t err = {{0}};
    env->msg_id = ++a->msg_id;
    if (guild_msg_send(a->pair_wrk, NULL, env, &err) < 0)
        guild_log(GUILD_LOG_WARN, "cannot queue %s for the coordinator: %s", guild_msg_body_name(env), err.msg);
}

void actor_ready_shard(actor_t *a, uint64_t generation, uint64_t load_ns, uint64_t resident_bytes, uint64_t first_seq,
                       const char *source, const expert_digest_t *d, size_t n)
{
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Ready r = GUILD__READY__INIT;
    r.generation = generation;
    r.load_ns = load_ns;
    r.resident_bytes = resident_bytes;
    r.first_seq = first_seq;
    r.model_source = (char *)(source ? source : "");
    Guild__TensorDigest *td = n ? calloc(n, sizeof *td) : NULL;
    Guild__TensorDigest **tp = n ? calloc(n, sizeof *tp) : NULL;
    if (n && (!td || !tp)) {
        free(td);
        free(tp);
        actor_error(a, GUILD__ERROR_CODE__ERROR_RESOURCE, false, generation, "ready: out of memory for %zu digests",
                    n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        guild__tensor_digest__init(&td[i]);
        td[i].tensor = (char *)d[i].tensor;
        td[i].type = d[i].type;
        td[i].n_ne = 4;
        td[i].ne = (int64_t *)d[i].ne;
        td[i].first = d[i].first;
        td[i].last = d[i].last;
        td[i].hash = d[i].hash;
        tp[i] = &td[i];
    }
    r.n_digests = n;
    r.digests = tp;
    env.body_case = GUILD__ENVELOPE__BODY_READY;
    env.ready = &r;
    atomic_store(&a->stats.resident_bytes, resident_bytes);
    forward(a, &env);
    free(td);
    free(tp);
}

void actor_ready(actor_t *a, uint64_t generation, uint64_t load_ns, uint64_t resident_bytes, uint64_t first_seq)
{
    actor_ready_shard(a, generation, load_ns, resident_bytes, first_seq, NULL, NULL, 0);
}

void actor_error(actor_t *a, Guild__ErrorCode code, bool fatal, uint64_t generation, const char *fmt, ...)
{
    char msg[GUILD_ERR_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    guild_log(GUILD_LOG_ERROR, "%s", msg);
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Error e = GUILD__ERROR__INIT;
    e.code = code;
    e.fatal = fatal;
    e.generation = generation;
    e.message = msg;
    env.body_case = GUILD__ENVELOPE__BODY_ERROR;
    env.error = &e;
    forward(a, &env);
}

void actor_set_silence(actor_t *a, uint32_t silence_ms)
{
    if (silence_ms)
        atomic_store(&a->silence_ms, silence_ms);
}

actor_stats_t *actor_stats(actor_t *a)
{
    return &a->stats;
}

static volatile sig_atomic_t *signal_flag;

static void on_signal(int sig)
{
    (void)sig;
    if (signal_flag)
        *signal_flag = 1;
}

int actor_install_signals(volatile sig_atomic_t *flag, guild_err_t *err)
{
    signal_flag = flag;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
        return guild_err_errno(err, errno, "sigaction");
    sa.sa_handler = SIG_IGN;
    if (sigaction(SIGPIPE, &sa, NULL) < 0)
        return guild_err_errno(err, errno, "sigaction");
    return 0;
}

void actor_set_routing(actor_t *a, const uint64_t *counts, size_t n)
{
    pthread_mutex_lock(&a->mu);
    if (n != a->n_routing) {
        uint64_t *r = realloc(a->routing, (n ? n : 1) * sizeof *r);
        if (!r) { /* keep the old counts: a stats answer a little stale */
            pthread_mutex_unlock(&a->mu);
            return;
        }
        a->routing = r;
        a->n_routing = n;
    }
    memcpy(a->routing, counts, n * sizeof *counts);
    pthread_mutex_unlock(&a->mu);
}
