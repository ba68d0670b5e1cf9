#include "cpu-expert-worker/experts/expert_share.h"

#include <stdlib.h>
#include <string.h>

struct expert_share {
    const model_config_t *cfg;
    int n_members, rank;
    expert_mats_t *mats; /* [n_layer][n_expert]; gate == NULL: the group does not hold it */
    int64_t count;
    int32_t layer;       /* the last plan's layer, -1 before the first */
    int32_t *pairs;      /* [n_expert] the last plan's pairs per held expert */
    int32_t *member;     /* [n_expert] and their members */
    int32_t *order;      /* [n_expert] scratch of expert_share_split */
    int32_t *h_pairs, *h_member; /* [n_expert] a prefetch hint's split (expert_share_hinted): not the plan's */
};

/* Insertion sort of the experts with pairs by cost descending, then id ascending (a total order: the same on
 * every worker; a layer has a few hundred experts at most, and a decode exchange a handful with pairs). */
static int32_t sort_by_cost(const int32_t *count, int32_t n_expert, int32_t *order)
{
    int32_t n = 0;
    for (int32_t e = 0; e < n_expert; e++) {
        if (count[e] <= 0)
            continue;
        int32_t i = n++;
        while (i > 0 && count[order[i - 1]] < count[e])
            order[i] = order[i - 1], i--;
        order[i] = e;
    }
    return n;
}

static void split_into(const int32_t *count, int32_t n_expert, int n_members, int32_t *member, int64_t *load,
                       int32_t *order)
{
    for (int m = 0; m < n_members; m++)
        load[m] = 0;
    for (int32_t e = 0; e < n_expert; e++)
        member[e] = -1;
    const int32_t n = sort_by_cost(count, n_expert, order);
    for (int32_t i = 0; i < n; i++) {
        int best = 0;
        for (int m = 1; m < n_members; m++)
            if (load[m] < load[best])
                best = m;
        member[order[i]] = best;
        load[best] += (int64_t)count[order[i]] + EXPERT_SHARE_READ_PAIRS;
    }
}

void expert_share_split(const int32_t *count, int32_t n_expert, int n_members, int32_t *member, int64_t *load)
{
    int32_t *order = malloc((size_t)(n_expert > 0 ? n_expert : 1) * sizeof *order);
    int64_t *l = load ? load : malloc((size_t)(n_members > 0 ? n_members : 1) * sizeof *l);
    GUILD_ASSERT(order && l);
    split_into(count, n_expert, n_members, member, l, order);
    free(order);
    if (!load)
        free(l);
}

int expert_share_new(expert_share_t **out, const model_config_t *cfg, int n_members, int rank, guild_err_t *err)
{
    *out = NULL;
    if (n_members < 1 || rank < 0 || rank >= n_members)
        return guild_err_set(err, "expert share: member %d of %d", rank, n_members);
    expert_share_t *s = calloc(1, sizeof *s);
    const size_t n = (size_t)cfg->n_layer * (size_t)cfg->n_expert, ne = (size_t)(cfg->n_expert > 0 ? cfg->n_expert : 1);
    if (!s || !(s->mats = calloc(n ? n : 1, sizeof *s->mats)) || !(s->pairs = calloc(ne, sizeof *s->pairs)) ||
        !(s->member = calloc(ne, sizeof *s->member)) || !(s->order = calloc(ne, sizeof *s->order)) ||
        !(s->h_pairs = calloc(ne, sizeof *s->h_pairs)) || !(s->h_member = calloc(ne, sizeof *s->h_member))) {
        expert_share_destroy(&s);
        return guild_err_set(err, "expert share: out of memory");
    }
    s->cfg = cfg;
    s->n_members = n_members;
    s->rank = rank;
    s->layer = -1;
    *out = s;
    return 0;
}

void expert_share_destroy(expert_share_t **sp)
{
    expert_share_t *s = *sp;
    if (!s)
        return;
    free(s->mats);
    free(s->pairs);
    free(s->member);
    free(s->order);
    free(s->h_pairs);
    free(s->h_member);
    free(s);
    *sp = NULL;
}

int expert_share_add(expert_share_t *s, int32_t layer, int32_t expert, const expert_mats_t *mats, guild_err_t *err)
{
    GUILD_ASSERT(layer >= 0 && layer < s->cfg->n_layer && expert >= 0 && expert < s->cfg->n_expert && mats->gate);
    expert_mats_t *m = &s->mats[(size_t)layer * (size_t)s->cfg->n_expert + (size_t)expert];
    if (m->gate)
        return guild_err_set(err, "expert share: layer %d expert %d is held twice", layer, expert);
    *m = *mats;
    s->count++;
    return 0;
}

int64_t expert_share_count(const expert_share_t *s)
{
    return s->count;
}

/* pairs[e]: how many of ids[0..n) name expert e of `layer` that the group holds (ids out of range or not held
 * count nowhere); member[e]: its member by the split's rule (split_into), -1 for the experts with no pair. */
static void split_held(expert_share_t *s, int32_t layer, size_t n, const int32_t *ids, int32_t *pairs,
                       int32_t *member)
{
    const int32_t E = s->cfg->n_expert;
    const expert_mats_t *held = &s->mats[(size_t)layer * (size_t)E];
    memset(pairs, 0, (size_t)E * sizeof *pairs);
    for (size_t p = 0; p < n; p++)
        if (ids[p] >= 0 && ids[p] < E && held[ids[p]].gate)
            pairs[ids[p]]++;
    int64_t load[256], *l = s->n_members <= 256 ? load : malloc((size_t)s->n_members * sizeof *l);
    GUILD_ASSERT(l);
    split_into(pairs, E, s->n_members, member, l, s->order);
    if (l != load)
        free(l);
}

int64_t expert_share_plan(expert_share_t *s, int32_t layer, int32_t n_tokens, const int32_t *ids)
{
    const int32_t E = s->cfg->n_expert;
    GUILD_ASSERT(layer >= 0 && layer < s->cfg->n_layer);
    /* an id out of range: the pipeline names it */
    split_held(s, layer, (size_t)n_tokens * (size_t)s->cfg->n_expert_used, ids, s->pairs, s->member);
    int64_t mine = 0;
    for (int32_t e = 0; e < E; e++)
        if (s->member[e] == s->rank)
            mine += s->pairs[e];
    s->layer = layer;
    return mine;
}

static const expert_mats_t *share_get(const void *ctx, int32_t layer, int32_t expert)
{
    const expert_share_t *s = ctx;
    if (layer != s->layer || s->member[expert] != s->rank)
        return NULL;
    return &s->mats[(size_t)layer * (size_t)s->cfg->n_expert + (size_t)expert];
}

void expert_share_src(expert_pipe_src_t *src, const expert_share_t *s)
{
    const model_config_t *c = s->cfg;
    *src = (expert_pipe_src_t){
        .n_layer = c->n_layer,
        .n_expert = c->n_expert,
        .n_expert_used = c->n_expert_used,
        .n_embd = c->n_embd,
        .n_ff = c->n_ff_exp,
        .get = share_get,
        .ctx = s,
        .act = model_expert_act_of(c),
    };
}

int32_t expert_share_hinted(expert_share_t *s, int32_t layer, int32_t n, const int32_t *ids, int32_t *out)
{
    const int32_t E = s->cfg->n_expert;
    if (layer < 0 || layer >= s->cfg->n_layer || n <= 0)
        return 0;
    split_held(s, layer, (size_t)n, ids, s->h_pairs, s->h_member);
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t e = ids[i];
        if (e < 0 || e >= E || s->h_member[e] != s->rank)
            continue;
        s->h_member[e] = -1; /* once */
        out[k++] = e;
    }
    return k;
}

static const expert_mats_t *held_get(const void *ctx, int32_t layer, int32_t expert)
{
    const expert_share_t *s = ctx;
    if (layer < 0 || layer >= s->cfg->n_layer || expert < 0 || expert >= s->cfg->n_expert)
        return NULL;
    const expert_mats_t *m = &s->mats[(size_t)layer * (size_t)s->cfg->n_expert + (size_t)expert];
    return m->gate ? m : NULL;
}

void expert_share_src_held(expert_pipe_src_t *src, const expert_share_t *s)
{
    expert_share_src(src, s);
    src->get = held_get;
}
