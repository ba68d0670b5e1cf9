#include "cpu-expert-worker/experts/expert_shard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/kern/pack.h"
#include "core/topo/topo.h"
#include "core/util/progress.h"

struct expert_shard {
    const model_config_t *cfg;
    expert_mats_t *mats; /* [n_layer][n_expert]; gate == NULL when not owned */
    int64_t count;
    int64_t packed;      /* matrices laid out packed */
    void *mem;           /* copy mode: the owned experts' matrices (topo_alloc, or the caller's), else NULL */
    size_t mem_size;
    bool own_mem;        /* mem is topo_alloc's */
    bool locked;
};

bool expert_layout_packs(expert_layout_t layout, guild_type_t type, int64_t rows)
{
    if (rows <= 0 || rows % KERN_PACK_ROWS)
        return false;
    switch (layout) {
    case EXPERT_LAYOUT_AUTO: return kern_pack_native(type);
    case EXPERT_LAYOUT_PACKED: return kern_pack_has(type);
    case EXPERT_LAYOUT_PLAIN: return false;
    }
    GUILD_ASSERT(!"unknown expert layout");
    return false;
}

static const char *const layout_names[] = {
    [EXPERT_LAYOUT_AUTO] = "auto",
    [EXPERT_LAYOUT_PLAIN] = "plain",
    [EXPERT_LAYOUT_PACKED] = "packed",
};

const char *expert_layout_name(expert_layout_t layout)
{
    GUILD_ASSERT((unsigned)layout < sizeof layout_names / sizeof layout_names[0]);
    return layout_names[layout];
}

int expert_layout_from_name(const char *s, expert_layout_t *layout)
{
    for (size_t i = 0; i < sizeof layout_names / sizeof layout_names[0]; i++)
        if (!strcmp(s, layout_names[i])) {
            *layout = (expert_layout_t)i;
            return 0;
        }
    return -1;
}

int expert_shard_new(expert_shard_t **out, const model_t *m, const uint8_t *owned, guild_err_t *err)
{
    *out = NULL;
    const model_config_t *c = model_config(m);
    const model_weights_t *w = model_weights(m);
    expert_shard_t *s = calloc(1, sizeof *s);
    size_t n = (size_t)c->n_layer * (size_t)c->n_expert;
    if (!s || !(s->mats = calloc(n, sizeof *s->mats))) {
        free(s);
        return guild_err_set(err, "expert shard: out of memory");
    }
    s->cfg = c;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        for (int32_t e = 0; e < c->n_expert; e++) {
            size_t i = (size_t)il * (size_t)c->n_expert + (size_t)e;
            if (owned && !owned[i])
                continue;
            if (!model_layer_has_experts(L)) { /* a dense layer: nothing to hold */
                if (owned) {
                    expert_shard_destroy(&s);
                    return guild_err_set(err, "expert shard: layer %d has no routed experts", il);
                }
                break;
            }
            s->mats[i] = (expert_mats_t){
                .gate = model_tensor_row(&L->gate_exps, e, 0),
                .up = model_tensor_row(&L->up_exps, e, 0),
                .down = model_tensor_row(&L->down_exps, e, 0),
                .gate_type = L->gate_exps.type,
                .up_type = L->up_exps.type,
                .down_type = L->down_exps.type,
                .gate_row = L->gate_exps.row_bytes,
                .up_row = L->up_exps.row_bytes,
                .down_row = L->down_exps.row_bytes,
                .gate_b = L->gate_exps_b.data ? model_tensor_row(&L->gate_exps_b, e, 0) : NULL,
                .up_b = L->up_exps_b.data ? model_tensor_row(&L->up_exps_b, e, 0) : NULL,
                .down_b = L->down_exps_b.data ? model_tensor_row(&L->down_exps_b, e, 0) : NULL,
            };
            s->count++;
        }
    }
    *out = s;
    return 0;
}

#define COPY_ALIGN 64 /* each matrix starts on a cache line */

static size_t align_up(size_t n)
{
    return (n + COPY_ALIGN - 1) & ~(size_t)(COPY_ALIGN - 1);
}

/* One expert's matrix of tensor t (*mat, in the mapping) into dst, packed when the layout says so; *mat then
 * points at the copy. */
static int copy_matrix(const model_tensor_t *t, const void **mat, bool *packed, expert_layout_t layout, char *dst,
                       guild_err_t *err)
{
    if (expert_layout_packs(layout, t->type, t->ne[1])) {
        if (kern_pack(t->type, t->ne[0], t->ne[1], *mat, t->row_bytes, dst, err) < 0)
            return guild_err_prefix(err, "expert shard: %s: ", t->name);
        *packed = true;
    } else {
        memcpy(dst, *mat, t->mat_bytes);
    }
    *mat = dst;
    return 0;
}

/* The copies' bytes for the experts s owns (each matrix on its own cache line). */
static size_t copy_bytes(const expert_shard_t *s, const model_weights_t *w)
{
    const model_config_t *c = s->cfg;
    size_t total = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        size_t per = align_up(L->gate_exps.mat_bytes) + align_up(L->up_exps.mat_bytes) + align_up(L->down_exps.mat_bytes);
        for (int k = 3; k < MODEL_EXPERT_TENSORS; k++) /* the biases, where the model has them */
            per += model_expert_tensor(L, k)->data ? align_up(model_expert_tensor(L, k)->mat_bytes) : 0;
        for (int32_t e = 0; e < c->n_expert; e++)
            if (s->mats[(size_t)il * (size_t)c->n_expert + (size_t)e].gate)
                total += per;
    }
    return total;
}

size_t expert_shard_copy_bytes(const model_t *m, const uint8_t *owned)
{
    const model_config_t *c = model_config(m);
    const model_weights_t *w = model_weights(m);
    size_t total = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        size_t per = align_up(L->gate_exps.mat_bytes) + align_up(L->up_exps.mat_bytes) + align_up(L->down_exps.mat_bytes);
        for (int k = 3; k < MODEL_EXPERT_TENSORS; k++) /* the biases, where the model has them */
            per += model_expert_tensor(L, k)->data ? align_up(model_expert_tensor(L, k)->mat_bytes) : 0;
        for (int32_t e = 0; e < c->n_expert; e++)
            if ((!owned || owned[(size_t)il * (size_t)c->n_expert + (size_t)e]) && L->gate_exps.data)
                total += per;
    }
    return total;
}

/* Copies every owned expert into s->mem (laid out in order, as expert_shard_new_copy says). */
static int copy_experts(expert_shard_t *s, const model_weights_t *w, bool interleave_gate_up, expert_layout_t layout,
                        guild_err_t *err)
{
    const model_config_t *c = s->cfg;
    char *dst = s->mem;
    /* a line on the terminal (core/util/progress.h) */
    guild_progress_t *pg = guild_progress_begin(layout == EXPERT_LAYOUT_PLAIN && !interleave_gate_up
                                                     ? "copying the experts" : "copying and repacking the experts",
                                                 s->mem_size, GUILD_PROGRESS_BYTES);
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        for (int32_t e = 0; e < c->n_expert; e++) {
            expert_mats_t *x = &s->mats[(size_t)il * (size_t)c->n_expert + (size_t)e];
            if (!x->gate)
                continue;
            guild_progress_add(pg, align_up(L->gate_exps.mat_bytes) + align_up(L->up_exps.mat_bytes) +
                                       align_up(L->down_exps.mat_bytes));
            /* packing wins over interleaving: a packed pair keeps its two matrices apart */
            if (interleave_gate_up && x->gate_type == x->up_type && x->gate_row == x->up_row &&
                L->gate_exps.mat_bytes == L->up_exps.mat_bytes &&
                !expert_layout_packs(layout, L->gate_exps.type, L->gate_exps.ne[1])) {
                /* both matrices in the space of the two, rows alternating */
                const size_t rb = x->gate_row, rows = L->gate_exps.mat_bytes / rb;
                char *pair = dst;
                for (size_t r = 0; r < rows; r++) {
                    memcpy(pair + 2 * r * rb, (const char *)x->gate + r * rb, rb);
                    memcpy(pair + (2 * r + 1) * rb, (const char *)x->up + r * rb, rb);
                }
                x->gate = pair;
                x->up = pair + rb;
                x->gate_row = x->up_row = 2 * rb;
                dst += align_up(L->gate_exps.mat_bytes) + align_up(L->up_exps.mat_bytes);
            } else {
                if (copy_matrix(&L->gate_exps, &x->gate, &x->gate_packed, layout, dst, err) < 0)
                    goto fail;
                dst += align_up(L->gate_exps.mat_bytes);
                if (copy_matrix(&L->up_exps, &x->up, &x->up_packed, layout, dst, err) < 0)
                    goto fail;
                dst += align_up(L->up_exps.mat_bytes);
            }
            if (copy_matrix(&L->down_exps, &x->down, &x->down_packed, layout, dst, err) < 0)
                goto fail;
            dst += align_up(L->down_exps.mat_bytes);
            /* the biases too: the mapping may be given back (a received shard, shard_fetch.h) */
            const float **bias[3] = {&x->gate_b, &x->up_b, &x->down_b};
            for (int k = 0; k < 3; k++)
                if (*bias[k]) {
                    const size_t bytes = model_expert_tensor(L, 3 + k)->mat_bytes;
                    memcpy(dst, *bias[k], bytes);
                    *bias[k] = (const float *)dst;
                    dst += align_up(bytes);
                }
            s->packed += x->gate_packed + x->up_packed + x->down_packed;
        }
    }
    guild_progress_end(&pg);
    return 0;
fail:
    guild_progress_end(&pg);
    return -1;
}

int expert_shard_new_copy(expert_shard_t **out, const model_t *m, const uint8_t *owned, int node, bool lock,
                          bool interleave_gate_up, expert_layout_t layout, guild_err_t *err)
{
    if (expert_shard_new(out, m, owned, err) < 0)
        return -1;
    expert_shard_t *s = *out;
    const model_weights_t *w = model_weights(m);
    const size_t total = copy_bytes(s, w);
    if (total == 0)
        return 0;
    guild_err_t aerr = {{0}};
    if (!(s->mem = topo_alloc(total, node, &aerr))) {
        guild_err_set(err, "expert shard: %zu bytes on NUMA node %d: %s", total, node, aerr.msg);
        goto fail;
    }
    s->mem_size = total;
    s->own_mem = true;
    if (lock) {
        if (mlock(s->mem, total) != 0) {
            guild_err_errno(err, errno, "expert shard: cannot lock %zu bytes in memory (RLIMIT_MEMLOCK, ulimit -l)",
                            total);
            goto fail;
        }
        s->locked = true;
    }
    if (copy_experts(s, w, interleave_gate_up, layout, err) < 0)
        goto fail;
    return 0;
fail:
    expert_shard_destroy(out);
    return -1;
}

int expert_shard_new_copy_at(expert_shard_t **out, const model_t *m, const uint8_t *owned, void *mem, size_t size,
                             bool interleave_gate_up, expert_layout_t layout, guild_err_t *err)
{
    if (expert_shard_new(out, m, owned, err) < 0)
        return -1;
    expert_shard_t *s = *out;
    const size_t total = copy_bytes(s, model_weights(m));
    if (total > size) {
        guild_err_set(err, "expert shard: %zu bytes of copies do not fit in the %zu given", total, size);
        goto fail;
    }
    s->mem = total ? mem : NULL;
    s->mem_size = total;
    if (total && copy_experts(s, model_weights(m), interleave_gate_up, layout, err) < 0)
        goto fail;
    return 0;
fail:
    expert_shard_destroy(out);
    return -1;
}

size_t expert_shard_resident_bytes(const expert_shard_t *s)
{
    return s->mem_size;
}

void expert_shard_destroy(expert_shard_t **sp)
{
    expert_shard_t *s = *sp;
    if (!s)
        return;
    if (s->locked)
        munlock(s->mem, s->mem_size);
    if (s->own_mem)
        topo_free(s->mem, s->mem_size);
    free(s->mats);
    free(s);
    *sp = NULL;
}

const expert_mats_t *expert_shard_get(const expert_shard_t *s, int32_t layer, int32_t expert)
{
    GUILD_ASSERT(layer >= 0 && layer < s->cfg->n_layer && expert >= 0 && expert < s->cfg->n_expert);
    const expert_mats_t *e = &s->mats[(size_t)layer * (size_t)s->cfg->n_expert + (size_t)expert];
    return e->gate ? e : NULL;
}

int64_t expert_shard_count(const expert_shard_t *s)
{
    return s->count;
}

int64_t expert_shard_packed_count(const expert_shard_t *s)
{
    return s->packed;
}

const model_config_t *expert_shard_config(const expert_shard_t *s)
{
    return s->cfg;
}
