#include "gpu-worker/dense/expert_split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct split_item {
    int32_t id, count;
    uint64_t bytes;
    double density; /* pairs per byte; +inf for an expert already on the device */
} split_item_t;

struct expert_split {
    int32_t n_expert;
    split_item_t *items; /* [n_expert] the experts with pairs, in the GPU's order */
};

int expert_split_new(expert_split_t **out, int32_t n_expert, guild_err_t *err)
{
    *out = NULL;
    expert_split_t *s = calloc(1, sizeof *s);
    if (!s || !(s->items = calloc((size_t)(n_expert > 0 ? n_expert : 1), sizeof *s->items))) {
        free(s);
        return guild_err_set(err, "expert split: out of memory for %d experts", n_expert);
    }
    s->n_expert = n_expert;
    *out = s;
    return 0;
}

void expert_split_destroy(expert_split_t **s)
{
    if (*s) {
        free((*s)->items);
        free(*s);
        *s = NULL;
    }
}

/* A total order: no two items compare equal, so qsort's result is the same on every libc. */
static int by_density(const void *pa, const void *pb)
{
    const split_item_t *a = pa, *b = pb;
    if (a->density != b->density)
        return a->density > b->density ? -1 : 1;
    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    return a->id < b->id ? -1 : 1;
}

static double gpu_time(const expert_split_model_t *m, uint64_t bytes, int64_t pairs)
{
    if (pairs == 0)
        return 0.0;
    const double copy = bytes == 0 ? 0.0 : m->copy_bpns > 0 ? (double)bytes / m->copy_bpns : INFINITY;
    const double run = m->gpu_ns_per_pair * (double)pairs;
    if (!m->pipelined)
        return copy + run;
    const double exposed = copy - m->copy_hidden_ns;
    return exposed > run ? exposed : run;
}

static double cpu_time(const expert_split_model_t *m, int64_t pairs)
{
    return pairs == 0 ? 0.0 : m->cpu_a_ns + m->cpu_b_ns * (double)pairs;
}

static double xchg_time(const expert_split_model_t *m, int64_t cpu_pairs)
{
    return cpu_pairs == 0 ? 0.0 : m->xchg_ns + m->xchg_ns_per_pair * (double)cpu_pairs;
}

void expert_split_plan(expert_split_t *s, const int32_t *count, const uint64_t *bytes,
                       const expert_split_model_t *model, uint8_t *on_gpu, expert_split_result_t *r)
{
    int32_t n = 0;
    int64_t total = 0;
    for (int32_t e = 0; e < s->n_expert; e++) {
        if (count[e] <= 0)
            continue;
        split_item_t *it = &s->items[n++];
        it->id = e;
        it->count = count[e];
        it->bytes = bytes[e];
        it->density = bytes[e] ? (double)count[e] / (double)bytes[e] : INFINITY;
        total += count[e];
    }
    qsort(s->items, (size_t)n, sizeof *s->items, by_density);

    /* the GPU's prefix: every length is tried (n is a layer's experts with pairs: a few hundred at most) */
    int32_t best = 0;
    if (model->force_gpu_fraction >= 0) {
        const double want = model->force_gpu_fraction * (double)total;
        int64_t pairs = 0;
        while (best < n && (double)pairs < want)
            pairs += s->items[best++].count;
    } else {
        double best_t = cpu_time(model, total) + xchg_time(model, total);
        uint64_t b = 0;
        int64_t pairs = 0;
        for (int32_t k = 1; k <= n; k++) {
            b += s->items[k - 1].bytes;
            pairs += s->items[k - 1].count;
            const double tg = gpu_time(model, b, pairs), tc = cpu_time(model, total - pairs);
            const double t = (tg > tc ? tg : tc) + xchg_time(model, total - pairs);
            if (t < best_t) { /* strictly: on a tie, fewer bytes copied */
                best_t = t;
                best = k;
            }
        }
    }

    memset(on_gpu, 0, (size_t)s->n_expert);
    memset(r, 0, sizeof *r);
    for (int32_t k = 0; k < n; k++) {
        const split_item_t *it = &s->items[k];
        if (k < best) {
            on_gpu[it->id] = 1;
            r->gpu_experts++;
            r->gpu_pairs += it->count;
            r->gpu_bytes += it->bytes;
        } else {
            r->cpu_experts++;
            r->cpu_pairs += it->count;
        }
    }
    r->t_gpu_ns = gpu_time(model, r->gpu_bytes, r->gpu_pairs);
    r->t_cpu_ns = cpu_time(model, r->cpu_pairs);
    r->t_xchg_ns = xchg_time(model, r->cpu_pairs);
}
