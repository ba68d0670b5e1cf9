#include "config.h"

#include "core/model/expert_digest.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/types.h"
#include "core/util/hash64.h"

/* One matrix to hash: (layer, kind, expert) and its bytes. */
typedef struct job {
    const void *data;
    size_t bytes;
    uint64_t hash;
} job_t;

typedef struct jobs {
    job_t *j;
} jobs_t;

static void hash_job(void *ctx, int64_t task, int thread)
{
    (void)thread;
    job_t *j = &((jobs_t *)ctx)->j[task];
    j->hash = hash64(j->data, j->bytes, 0);
}

/* The layer's expert tensors present (the weights, and their biases where the model has them). */
static int present_kinds(const model_layer_t *L)
{
    int n = 0;
    for (int k = 0; k < MODEL_EXPERT_TENSORS; k++)
        n += model_expert_tensor(L, k)->data != NULL;
    return n;
}

static void put_u32(hash64_t *h, uint32_t v)
{
    hash64_update(h, &v, sizeof v);
}

static void put_i64(hash64_t *h, int64_t v)
{
    hash64_update(h, &v, sizeof v);
}

int expert_digest_compute(const model_t *m, const uint8_t *owned, guild_pool_t *pool, expert_digest_t **out,
                          size_t *n, guild_err_t *err)
{
    *out = NULL;
    *n = 0;
    const model_config_t *c = model_config(m);
    const model_weights_t *w = model_weights(m);
    const size_t ne = (size_t)c->n_expert;
    /* the entries and the matrices: count, check, list */
    size_t n_ent = 1, n_job = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        size_t k = 0;
        for (size_t e = 0; e < ne; e++)
            k += !owned || owned[(size_t)il * ne + e];
        if (!k)
            continue;
        if (!w->layers[il].gate_exps.data || !w->layers[il].up_exps.data || !w->layers[il].down_exps.data) {
            if (!owned)
                continue;
            return guild_err_set(err, "expert digest: layer %d has no routed experts", il);
        }
        n_ent += (size_t)present_kinds(&w->layers[il]);
        n_job += (size_t)present_kinds(&w->layers[il]) * k;
    }
    expert_digest_t *d = calloc(n_ent, sizeof *d);
    jobs_t jobs = {calloc(n_job ? n_job : 1, sizeof *jobs.j)};
    if (!d || !jobs.j) {
        free(d);
        free(jobs.j);
        return guild_err_set(err, "expert digest: out of memory");
    }
    size_t nj = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        if (!L->gate_exps.data || !L->up_exps.data || !L->down_exps.data)
            continue;
        for (int k = 0; k < MODEL_EXPERT_TENSORS; k++)
            for (size_t e = 0; e < ne; e++)
                if (model_expert_tensor(L, k)->data && (!owned || owned[(size_t)il * ne + e])) {
                    const model_tensor_t *t = model_expert_tensor(L, k);
                    jobs.j[nj++] = (job_t){model_tensor_row(t, (int64_t)e, 0), t->mat_bytes, 0};
                }
    }
    if (pool)
        guild_pool_run(pool, (int64_t)nj, hash_job, &jobs);
    else
        for (size_t i = 0; i < nj; i++)
            hash_job(&jobs, (int64_t)i, 0);

    /* the settings the expert computation reads */
    hash64_t h;
    hash64_init(&h, 0);
    put_u32(&h, (uint32_t)c->n_layer);
    put_u32(&h, (uint32_t)c->n_expert);
    put_u32(&h, (uint32_t)c->n_expert_used);
    put_u32(&h, (uint32_t)c->n_embd);
    put_u32(&h, (uint32_t)c->n_ff_exp);
    put_u32(&h, (uint32_t)c->ffn.kind);
    put_u32(&h, c->ffn.opts);
    snprintf(d[0].tensor, sizeof d[0].tensor, "%s", EXPERT_DIGEST_CONFIG);
    d[0].hash = hash64_final(&h);
    size_t ni = 1;
    nj = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        if (!L->gate_exps.data || !L->up_exps.data || !L->down_exps.data)
            continue;
        size_t k_owned = 0;
        for (size_t e = 0; e < ne; e++)
            k_owned += !owned || owned[(size_t)il * ne + e];
        if (!k_owned)
            continue;
        for (int k = 0; k < MODEL_EXPERT_TENSORS; k++) {
            const model_tensor_t *t = model_expert_tensor(L, k);
            if (!t->data)
                continue;
            expert_digest_t *x = &d[ni++];
            snprintf(x->tensor, sizeof x->tensor, "%s", t->name ? t->name : "?");
            x->type = (uint32_t)t->type;
            memcpy(x->ne, t->ne, sizeof x->ne);
            hash64_init(&h, 0);
            hash64_update(&h, x->tensor, strlen(x->tensor) + 1);
            put_u32(&h, x->type);
            for (int i = 0; i < 4; i++)
                put_i64(&h, x->ne[i]);
            bool any = false;
            for (size_t e = 0; e < ne; e++)
                if (!owned || owned[(size_t)il * ne + e]) {
                    put_u32(&h, (uint32_t)e);
                    hash64_update(&h, &jobs.j[nj++].hash, sizeof(uint64_t));
                    if (!any)
                        x->first = (uint32_t)e;
                    x->last = (uint32_t)e;
                    any = true;
                }
            x->hash = hash64_final(&h);
        }
    }
    free(jobs.j);
    *out = d;
    *n = ni;
    return 0;
}

static const char *type_name(uint32_t t)
{
    const quant_type_info_t *q = quant_type_info(t);
    return q ? q->name : "?";
}

int expert_digest_compare(const expert_digest_t *want, size_t n_want, const expert_digest_t *got, size_t n_got,
                          guild_err_t *err)
{
    for (size_t i = 0; i < n_want; i++) {
        const expert_digest_t *a = &want[i];
        const expert_digest_t *b = i < n_got ? &got[i] : NULL;
        if (!b || strcmp(a->tensor, b->tensor) != 0) {
            if (!strcmp(a->tensor, EXPERT_DIGEST_CONFIG))
                return guild_err_set(err, "no digest of the expert settings");
            return guild_err_set(err, "tensor %s (experts %u-%u): missing%s%s", a->tensor, a->first, a->last,
                                 b ? ", found " : "", b ? b->tensor : "");
        }
        if (a->hash == b->hash)
            continue;
        if (!strcmp(a->tensor, EXPERT_DIGEST_CONFIG))
            return guild_err_set(err, "the expert settings differ (expert counts, widths or the FFN kind)");
        if (a->type != b->type)
            return guild_err_set(err, "tensor %s: type %s here, %s there", a->tensor, type_name(a->type),
                                 type_name(b->type));
        if (memcmp(a->ne, b->ne, sizeof a->ne) != 0)
            return guild_err_set(err, "tensor %s: shape [%lld, %lld, %lld] here, [%lld, %lld, %lld] there", a->tensor,
                                 (long long)a->ne[0], (long long)a->ne[1], (long long)a->ne[2], (long long)b->ne[0],
                                 (long long)b->ne[1], (long long)b->ne[2]);
        return guild_err_set(err, "tensor %s (experts %u-%u): its bytes differ", a->tensor, a->first, a->last);
    }
    if (n_got > n_want)
        return guild_err_set(err, "tensor %s: not part of this shard", got[n_want].tensor);
    return 0;
}
