#include "config.h"

#include "coordinator/bridge.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "core/gguf/gguf.h"
#include "core/util/log.h"
#include "ipc/doorbell.h"
#include "ipc/data.h"

#define SLICE_MS 10 /* how late a DataHello (or a stop) may be noticed */

typedef struct bworker {
    uint64_t assigned;     /* under mu: the generation assigned (may read the model file); 0: none */
    uint64_t generation;   /* under mu: 0 = not bridged */
    char user[GUILD_CURVE_NAME_MAX]; /* under mu: the CURVE key its control connection came with ("": none) */
    /* bridge thread only: */
    uint64_t peer_generation; /* the generation whose DataHello gave `peer` */
    guild_msg_peer_t peer;
    uint64_t pending;      /* exchange sent, result awaited (0: none) */
} bworker_t;

struct bridge {
    void *router;
    guild_exchange_t *x;
    const placement_t *plan;
    int n_workers;
    bworker_t *w;
    pthread_mutex_t mu;
    pthread_t thread;
    bool started;
    _Atomic int stop;
    int32_t *pairs; /* scratch [max_tokens * n_used] */
    /* the model file ShardRead reads (bridge thread; opened at the first read) */
    const char *model_path;
    int fd;
    uint64_t file_size, data_offset;
    uint8_t *buf; /* [DATA_MAX_SHARD_BYTES] */
};

void bridge_set_worker(bridge_t *b, int worker, uint64_t generation, const char *user, bool serving)
{
    GUILD_ASSERT(worker >= 0 && worker < b->n_workers);
    pthread_mutex_lock(&b->mu);
    b->w[worker].assigned = generation;
    b->w[worker].generation = serving ? generation : 0;
    snprintf(b->w[worker].user, sizeof b->w[worker].user, "%s", user ? user : "");
    pthread_mutex_unlock(&b->mu);
}

/* Opens the model file for ShardRead: its size and where its tensor data starts (a validated GGUF). */
static int open_model(bridge_t *b, guild_err_t *err)
{
    if (b->fd >= 0)
        return 0;
    gguf_t *g = NULL;
    if (gguf_new(&g, b->model_path, err) < 0)
        return -1;
    /* a worker rebuilds its shard as one file from the header and the bytes it reads (shard_fetch.h) */
    const int parts = gguf_n_parts(g);
    b->file_size = gguf_file_size(g);
    b->data_offset = gguf_data_offset(g);
    gguf_destroy(&g);
    if (parts > 1)
        return guild_err_set(err, "%s is split into %d files: a worker cannot receive its shard of it; give the "
                             "worker its own copy (guild-cpu-worker --model)", b->model_path, parts);
    if (!b->buf && !(b->buf = malloc(DATA_MAX_SHARD_BYTES)))
        return guild_err_set(err, "out of memory");
    if ((b->fd = open(b->model_path, O_RDONLY | O_CLOEXEC)) < 0)
        return guild_err_errno(err, errno, "%s", b->model_path);
    return 0;
}

/* A worker's read of the model file: answered with the bytes, or with why not. */
static void on_shard_read(bridge_t *b, const data_msg_t *m)
{
    const Guild__ShardRead *r = m->hdr->shard_read;
    char why[GUILD_ERR_MAX + 64] = "";
    guild_err_t err = {{0}};
    if (r->worker >= (uint32_t)b->n_workers) {
        snprintf(why, sizeof why, "no worker %u in the plan", r->worker);
    } else {
        pthread_mutex_lock(&b->mu);
        const bworker_t *w = &b->w[r->worker];
        const bool assigned = w->assigned && w->assigned == r->generation;
        const bool same_key = !strcmp(w->user, m->from.user);
        pthread_mutex_unlock(&b->mu);
        if (!assigned)
            snprintf(why, sizeof why, "cpu-worker[%u] is not assigned generation %llu", r->worker,
                     (unsigned long long)r->generation);
        else if (!same_key)
            snprintf(why, sizeof why, "cpu-worker[%u]'s control connection came with another key", r->worker);
        else if (open_model(b, &err) < 0)
            snprintf(why, sizeof why, "%s", err.msg);
        else if (r->length > DATA_MAX_SHARD_BYTES || r->offset > b->file_size || r->length > b->file_size - r->offset)
            snprintf(why, sizeof why, "bytes %llu+%llu: outside the model file (%llu bytes) or too many at once",
                     (unsigned long long)r->offset, (unsigned long long)r->length, (unsigned long long)b->file_size);
    }
    size_t done = 0;
    while (!why[0] && done < r->length) {
        ssize_t n = pread(b->fd, b->buf + done, (size_t)r->length - done, (off_t)(r->offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            snprintf(why, sizeof why, "%s: read at %llu: %s", b->model_path, (unsigned long long)(r->offset + done),
                     n < 0 ? strerror(errno) : "end of file");
        else
            done += (size_t)n;
    }
    if (why[0])
        guild_log(GUILD_LOG_WARN, "bridge: shard read from %s refused: %s", m->from.user[0] ? m->from.user : "a worker",
                  why);
    if (data_send_shard_data(b->router, &m->from, r->offset, r->length, b->file_size, b->data_offset, b->buf,
                             why[0] ? why : NULL, &err) < 0)
        guild_log(GUILD_LOG_INFO, "bridge: %s", err.msg);
}

static void on_hello(bridge_t *b, const data_msg_t *m)
{
    const Guild__DataHello *h = m->hdr->hello;
    if (h->worker >= (uint32_t)b->n_workers) {
        guild_log(GUILD_LOG_WARN, "bridge: hello from a worker %u, the plan has %d", h->worker, b->n_workers);
        return;
    }
    bworker_t *w = &b->w[h->worker];
    pthread_mutex_lock(&b->mu);
    const uint64_t gen = w->assigned;
    const bool same_key = !strcmp(w->user, m->from.user);
    pthread_mutex_unlock(&b->mu);
    if (!gen || h->generation != gen || !same_key) {
        guild_log(GUILD_LOG_INFO, "bridge: %s hello for cpu-worker[%u] (generation %llu)",
                  same_key ? "stale" : "another key's", h->worker, (unsigned long long)h->generation);
        return;
    }
    /* kept: its exchanges come once the supervisor says it serves (bridge_set_worker) */
    w->peer = m->from;
    w->peer_generation = gen;
    w->pending = 0; /* (re)send the exchange it has to do */
    guild_log(GUILD_LOG_INFO, "bridge: cpu-worker[%u] connected its data socket", h->worker);
}

static void on_result(bridge_t *b, const data_msg_t *m)
{
    int k = -1;
    for (int i = 0; i < b->n_workers && k < 0; i++)
        if (b->w[i].peer.len == m->from.len && m->from.len && !memcmp(b->w[i].peer.id, m->from.id, m->from.len))
            k = i;
    const Guild__ExchangeResult *r = m->hdr->result;
    if (k < 0 || !b->w[k].pending || r->seq != b->w[k].pending) {
        guild_log(GUILD_LOG_INFO, "bridge: result for exchange %llu not awaited; dropped", (unsigned long long)r->seq);
        return;
    }
    guild_exchange_slot_t slot;
    guild_exchange_view(b->x, r->seq, &slot);
    const guild_exchange_shape_t *sh = guild_exchange_shape(b->x);
    /* exactly the pairs the plan gives worker k, ascending */
    uint32_t n = 0;
    uint32_t first, count;
    placement_range(b->plan, k, slot.layer, &first, &count);
    for (int32_t p = 0; p < slot.n_tokens * (int32_t)sh->n_used; p++) {
        uint32_t e = (uint32_t)slot.ids[p];
        if (slot.ids[p] >= 0 && e >= first && e - first < count) /* < 0: a skipped pair (moe_exec.h) */
            b->pairs[n++] = p;
    }
    const int32_t *got = m->array[0];
    size_t ybytes = (size_t)r->n_pairs * sh->n_embd * sizeof(float);
    if (r->n_pairs != n || memcmp(got, b->pairs, (size_t)n * sizeof *got) != 0 ||
        (n && !m->array[1]) || (n && ybytes == 0)) {
        guild_log(GUILD_LOG_ERROR, "bridge: cpu-worker[%d]: exchange %llu: %u pairs returned, %u expected (or other "
                  "pairs); dropped", k, (unsigned long long)r->seq, r->n_pairs, n);
        return;
    }
    const float *y = m->array[1];
    for (uint32_t i = 0; i < n; i++)
        memcpy(slot.y + (size_t)got[i] * sh->n_embd, y + (size_t)i * sh->n_embd, sh->n_embd * sizeof(float));
    guild_exchange_complete(b->x, k, r->seq);
    b->w[k].pending = 0;
}

static void *bridge_main(void *arg)
{
    bridge_t *b = arg;
    const guild_exchange_shape_t *sh = guild_exchange_shape(b->x);
    while (!atomic_load(&b->stop)) {
        bool active = false, pending = false;
        uint64_t step = guild_exchange_step(b->x);
        for (int k = 0; k < b->n_workers; k++) {
            bworker_t *w = &b->w[k];
            pthread_mutex_lock(&b->mu);
            uint64_t gen = w->generation;
            pthread_mutex_unlock(&b->mu);
            if (!gen || w->peer_generation != gen) {
                w->pending = 0; /* gone or replaced: the new one gets it after its hello */
                continue;
            }
            active = true;
            uint64_t next = guild_exchange_done(b->x, k) + 1;
            if (w->pending || step < next)
                continue;
            guild_exchange_slot_t slot;
            guild_wait_policy_t now = {.spin_ns = 0, .timeout_ns = 1};
            guild_err_t err = {{0}};
            if (guild_exchange_wait_step(b->x, next, &now, &slot, NULL, &err) != GUILD_WAIT_OK) {
                guild_log(GUILD_LOG_ERROR, "bridge: cpu-worker[%d]: %s", k, err.msg);
                continue;
            }
            if (data_send_request(b->router, &w->peer, next, slot.layer, (uint32_t)slot.n_tokens, sh->n_used,
                                  sh->n_embd, slot.x, slot.ids, &err) < 0) {
                guild_log(GUILD_LOG_INFO, "bridge: cpu-worker[%d]: %s", k, err.msg);
                continue;
            }
            w->pending = next;
        }
        for (int k = 0; k < b->n_workers; k++)
            pending |= b->w[k].pending != 0;
        if (active && !pending) {
            /* every bridged worker is idle: sleep on the step doorbell, woken by the next exchange */
            guild_wait_policy_t pol = {.spin_ns = 20000, .timeout_ns = SLICE_MS * 1000000ull};
            (void)guild_doorbell_wait(guild_exchange_step_doorbell(b->x), step + 1, &pol, NULL, NULL, "step", NULL);
        }
        data_msg_t m;
        guild_err_t err = {{0}};
        guild_msg_result_t r = data_recv(b->router, pending || !active ? SLICE_MS : 0, &m, &err);
        if (r == GUILD_MSG_BAD || r == GUILD_MSG_ERROR) {
            guild_log(GUILD_LOG_WARN, "bridge: %s", err.msg);
            continue;
        }
        if (r != GUILD_MSG_OK)
            continue;
        if (m.hdr->body_case == GUILD__DATA__BODY_HELLO)
            on_hello(b, &m);
        else if (m.hdr->body_case == GUILD__DATA__BODY_SHARD_READ)
            on_shard_read(b, &m);
        else if (m.hdr->body_case == GUILD__DATA__BODY_RESULT)
            on_result(b, &m);
        else
            guild_log(GUILD_LOG_WARN, "bridge: unexpected data message %d", (int)m.hdr->body_case);
        data_msg_close(&m);
    }
    return NULL;
}

int bridge_new(bridge_t **out, void *zctx, const char *endpoint, const char *model_path, const guild_curve_t *curve,
               guild_exchange_t *x, const placement_t *plan, guild_err_t *err)
{
    *out = NULL;
    bridge_t *b = calloc(1, sizeof *b);
    if (!b)
        return guild_err_set(err, "bridge: out of memory");
    b->model_path = model_path;
    b->fd = -1;
    pthread_mutex_init(&b->mu, NULL);
    b->x = x;
    b->plan = plan;
    b->n_workers = placement_workers(plan);
    const guild_exchange_shape_t *sh = guild_exchange_shape(x);
    b->w = calloc((size_t)b->n_workers, sizeof *b->w);
    b->pairs = malloc((size_t)sh->max_tokens * sh->n_used * sizeof *b->pairs);
    if (!b->w || !b->pairs) {
        guild_err_set(err, "bridge: out of memory");
        goto fail;
    }
    if (!(b->router = data_router_new(zctx, endpoint, curve, err)))
        goto fail;
    int e = pthread_create(&b->thread, NULL, bridge_main, b);
    if (e) {
        guild_err_errno(err, e, "bridge: cannot start its thread");
        goto fail;
    }
    b->started = true;
    *out = b;
    return 0;
fail:
    bridge_destroy(&b);
    return -1;
}

void bridge_destroy(bridge_t **pb)
{
    bridge_t *b = *pb;
    if (!b)
        return;
    if (b->started) {
        atomic_store(&b->stop, 1);
        pthread_join(b->thread, NULL);
    }
    if (b->router)
        zmq_close(b->router);
    if (b->fd >= 0)
        close(b->fd);
    free(b->buf);
    free(b->w);
    free(b->pairs);
    pthread_mutex_destroy(&b->mu);
    free(b);
    *pb = NULL;
}
