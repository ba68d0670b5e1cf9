#include "config.h"

#include "coordinator/shard_verify.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/log.h"
#include "ipc/doorbell.h"

typedef enum vstate { V_NONE, V_WANTED, V_DONE, V_FAILED } vstate_t;

typedef struct vworker {
    vstate_t state;        /* under mu */
    expert_digest_t *d;    /* [n] when V_DONE */
    size_t n;
    guild_err_t err;       /* when V_FAILED */
} vworker_t;

struct shard_verify {
    const char *model_path;
    const placement_t *plan;
    int n_workers;
    vworker_t *w;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    pthread_t thread;
    bool started, stop;    /* stop: under mu */
};

/* The owned flags of plan worker k: what its Assign lists (its range less the experts on the GPU). */
static uint8_t *owned_of(const placement_t *p, const model_config_t *c, int k)
{
    uint8_t *o = calloc((size_t)c->n_layer * (size_t)c->n_expert, 1);
    if (o)
        for (int il = 0; il < c->n_layer; il++)
            for (int e = 0; e < c->n_expert; e++)
                o[(size_t)il * (size_t)c->n_expert + (size_t)e] = placement_owner(p, il, e) == k;
    return o;
}

static void *verify_main(void *arg)
{
    shard_verify_t *v = arg;
    model_t *m = NULL;
    pthread_mutex_lock(&v->mu);
    for (;;) {
        int k = -1;
        while (!v->stop && k < 0) {
            for (int i = 0; i < v->n_workers && k < 0; i++)
                if (v->w[i].state == V_WANTED)
                    k = i;
            if (k < 0 && !v->stop)
                pthread_cond_wait(&v->cond, &v->mu);
        }
        if (v->stop)
            break;
        pthread_mutex_unlock(&v->mu);
        guild_err_t err = {{0}};
        expert_digest_t *d = NULL;
        size_t n = 0;
        uint8_t *owned = NULL;
        uint64_t t0 = guild_now_ns();
        int rc = -1;
        if (m || model_new(&m, v->model_path, &err) == 0) {
            if (placement_layers(v->plan) != model_config(m)->n_layer)
                guild_err_set(&err, "%s: %d layers, the plan was made for %d", v->model_path,
                              model_config(m)->n_layer, placement_layers(v->plan));
            else if (!(owned = owned_of(v->plan, model_config(m), k)))
                guild_err_set(&err, "out of memory");
            else
                rc = expert_digest_compute(m, owned, NULL, &d, &n, &err);
        }
        free(owned);
        if (rc == 0)
            guild_log(GUILD_LOG_INFO, "shard digests of cpu-worker[%d]: %zu tensors in %.1f ms", k, n - 1,
                      (double)(guild_now_ns() - t0) / 1e6);
        pthread_mutex_lock(&v->mu);
        vworker_t *w = &v->w[k];
        if (rc == 0) {
            w->d = d;
            w->n = n;
            w->state = V_DONE;
        } else {
            w->err = err;
            w->state = V_FAILED;
        }
    }
    pthread_mutex_unlock(&v->mu);
    model_destroy(&m);
    return NULL;
}

int shard_verify_new(shard_verify_t **out, const char *model_path, const placement_t *plan, guild_err_t *err)
{
    *out = NULL;
    shard_verify_t *v = calloc(1, sizeof *v);
    if (!v)
        return guild_err_set(err, "shard verification: out of memory");
    v->model_path = model_path;
    v->plan = plan;
    v->n_workers = placement_workers(plan);
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->cond, NULL);
    if (!(v->w = calloc((size_t)v->n_workers, sizeof *v->w))) {
        guild_err_set(err, "shard verification: out of memory");
        goto fail;
    }
    int e = pthread_create(&v->thread, NULL, verify_main, v);
    if (e) {
        guild_err_errno(err, e, "shard verification: cannot start its thread");
        goto fail;
    }
    v->started = true;
    *out = v;
    return 0;
fail:
    shard_verify_destroy(&v);
    return -1;
}

void shard_verify_destroy(shard_verify_t **pv)
{
    shard_verify_t *v = *pv;
    if (!v)
        return;
    if (v->started) {
        pthread_mutex_lock(&v->mu);
        v->stop = true;
        pthread_cond_broadcast(&v->cond);
        pthread_mutex_unlock(&v->mu);
        pthread_join(v->thread, NULL);
    }
    for (int i = 0; v->w && i < v->n_workers; i++)
        free(v->w[i].d);
    free(v->w);
    pthread_cond_destroy(&v->cond);
    pthread_mutex_destroy(&v->mu);
    free(v);
    *pv = NULL;
}

int shard_verify_check(shard_verify_t *v, int worker, const expert_digest_t *got, size_t n_got, guild_err_t *err)
{
    GUILD_ASSERT(worker >= 0 && worker < v->n_workers);
    int rc;
    pthread_mutex_lock(&v->mu);
    vworker_t *w = &v->w[worker];
    switch (w->state) {
    case V_NONE:
        w->state = V_WANTED;
        pthread_cond_broadcast(&v->cond);
        /* fall through */
    case V_WANTED: rc = 0; break;
    case V_FAILED: rc = guild_err_set(err, "the coordinator's own digests: %s", w->err.msg); break;
    default: rc = expert_digest_compare(w->d, w->n, got, n_got, err) < 0 ? -1 : 1; break;
    }
    pthread_mutex_unlock(&v->mu);
    return rc;
}
