/* The streamed experts' staging slots and their fill order (contract in cuda_expert_stream.h). */
#include "gpu-worker/dense/cuda/cuda_expert_stream.h"

#include <stdlib.h>
#include <string.h>

#include "core/kern/pack.h"
#include "core/util/log.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_stage.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "ipc/doorbell.h" /* guild_now_ns */

#define ALIGN 256u
#define REC_ALIGN 64u /* an expert record's size is rounded to this (expert_shard.c's matrix alignment) */
#define XS_TABLES 8   /* gather tables kept: packed (type, row size) kinds; a model has two or three */

typedef struct xs_lay {
    bool on;                      /* streams */
    bool record;                  /* device layout: the host's expert records (else three regions) */
    guild_type_t gate_type, down_type;
    int64_t n_embd, n_ff;
    size_t gate_rb, down_rb, gate_mat, down_mat;
    size_t stride;                /* record: between experts */
    size_t up_off, down_off;      /* record: from an expert's gate; regions: in the slot */
    size_t tail;                  /* record: bytes from an expert's gate to the end of its down matrix */
    size_t gate_row, down_row;    /* row strides as the source's */
    bool gate_packed, up_packed, down_packed;
    int32_t cap;                  /* experts per slot */
    const expert_host_mats_t *src;
} xs_lay_t;

typedef struct xs_q {
    int32_t layer, lo, hi; /* ranks */
    int32_t first;         /* its experts: ids[first .. first + hi - lo) */
} xs_q_t;

struct xs {
    int32_t n_layer, n_expert, n_slots;
    size_t slot_bytes;
    xs_lay_t *lay;                 /* [n_layer] */
    char *mem;                     /* [n_slots][slot_bytes] device */
    struct cuda_stage *stage;      /* borrowed */
    cudaStream_t copy, unpack;
    cudaEvent_t *ready, *consumed, *raw; /* [n_slots] */
    cuda_stage_piece_t *pieces;    /* [3 * max cap] */
    int32_t max_cap;

    /* the pass's queue */
    int32_t *ids;                  /* [n_layer * n_expert] */
    int32_t n_ids;
    xs_q_t *q;                     /* [max_q] */
    int32_t max_q, n_q;
    int32_t copied, used, done;    /* chunks whose copies are enqueued, waited for, released */
    uint64_t pass_bytes;
    bool unpacked;                 /* a chunk of this pass was unpacked */
    /* timing events per chunk of the pass, created as needed: copies (copy stream), waits (compute stream) */
    cudaEvent_t *c0, *c1, *w0, *w1;
    int32_t n_ev;

    double *layer_wait;            /* [n_layer] ns: the last folded pass's waits per layer */
    xs_stats_t stats;
    /* the unpacking's gather tables (cuda_expert_unpack_table), one per packed type and row size streamed */
    struct {
        guild_type_t type;
        size_t rb;
        uint32_t *dev;
    } tab[XS_TABLES];
    int n_tab;
};

/* The gather table of packed rows of `type` of rb bytes, made on first use; NULL when none is kept (too many
 * kinds: that matrix is unpacked with the places computed per byte). */
static const uint32_t *table_for(xs_t *xs, guild_type_t type, size_t rb, size_t *bytes, guild_err_t *err, int *rc)
{
    for (int i = 0; i < xs->n_tab; i++)
        if (xs->tab[i].type == type && xs->tab[i].rb == rb)
            return xs->tab[i].dev;
    const kern_pack_layout_t *pl = kern_pack_layout(type);
    if (!pl || xs->n_tab == XS_TABLES)
        return NULL;
    uint32_t *d = NULL;
    if (cuda_expert_unpack_table(pl, rb, &d, bytes, err) < 0) {
        *rc = -1;
        return NULL;
    }
    xs->tab[xs->n_tab].type = type;
    xs->tab[xs->n_tab].rb = rb;
    xs->tab[xs->n_tab++].dev = d;
    return d;
}

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* The layout of layer il from its sources: 0 with lay->on set or not (a log says why not). */
static void lay_init(xs_lay_t *L, const xs_layer_desc_t *d, int32_t il, int32_t n_expert, size_t slot_bytes)
{
    memset(L, 0, sizeof *L);
    if (!d->src)
        return;
    L->gate_type = d->gate_type;
    L->down_type = d->down_type;
    L->n_embd = d->n_embd;
    L->n_ff = d->n_ff;
    L->gate_rb = d->gate_rb;
    L->down_rb = d->down_rb;
    L->gate_mat = d->gate_rb * (size_t)d->n_ff;
    L->down_mat = d->down_rb * (size_t)d->n_embd;
    L->src = d->src;
    const expert_host_mats_t *first = NULL;
    bool record = true;
    ptrdiff_t du = 0, dd = 0;
    for (int32_t e = 0; e < n_expert; e++) {
        const expert_host_mats_t *x = &d->src[e];
        if (!x->gate)
            continue;
        const ptrdiff_t u = (const char *)x->up - (const char *)x->gate, dn = (const char *)x->down - (const char *)x->gate;
        if (!first) {
            first = x;
            du = u;
            dd = dn;
        }
        if (x->gate_row != first->gate_row || x->up_row != first->up_row || x->down_row != first->down_row ||
            x->gate_packed != first->gate_packed || x->up_packed != first->up_packed ||
            x->down_packed != first->down_packed) {
            guild_log(GUILD_LOG_WARN, "cuda moe: layer %d: its experts' copies differ in layout: not streamed", il);
            return;
        }
        record = record && u == du && dn == dd;
    }
    if (!first)
        return;
    const bool interleaved = first->gate_row == 2 * d->gate_rb;
    if (first->gate_row != first->up_row || (first->gate_row != d->gate_rb && !interleaved) ||
        first->down_row != d->down_rb || (interleaved && (first->gate_packed || du != (ptrdiff_t)d->gate_rb))) {
        guild_log(GUILD_LOG_WARN, "cuda moe: layer %d: rows of %zu/%zu/%zu bytes (plain %zu/%zu): not streamed", il,
                  first->gate_row, first->up_row, first->down_row, d->gate_rb, d->down_rb);
        return;
    }
    L->gate_packed = first->gate_packed;
    L->up_packed = first->up_packed;
    L->down_packed = first->down_packed;
    L->gate_row = first->gate_row;
    L->down_row = first->down_row;
    /* the host's records when every expert's matrices are together at the same offsets, aligned for the kernels
     * and within a record of at most twice the matrices' size */
    const size_t mats = 2 * L->gate_mat + L->down_mat;
    record = record && du > 0 && dd > du && du % 16 == 0 && dd % 16 == 0 &&
             (size_t)dd + L->down_mat <= 2 * mats && (interleaved || (size_t)du >= L->gate_mat) &&
             (size_t)dd >= (interleaved ? 2 * L->gate_mat : (size_t)du + L->gate_mat);
    if (record) {
        L->record = true;
        L->up_off = (size_t)du;
        L->down_off = (size_t)dd;
        L->tail = (size_t)dd + L->down_mat;
        L->stride = round_up(L->tail, REC_ALIGN);
        L->cap = (int32_t)(slot_bytes / L->stride);
    } else if (interleaved) {
        guild_log(GUILD_LOG_WARN, "cuda moe: layer %d: interleaved gate/up rows outside expert records: not "
                  "streamed", il);
        return;
    } else {
        /* three regions: the largest count whose regions fit */
        int32_t lo = 0, hi = n_expert;
        while (lo < hi) {
            const int32_t m = (lo + hi + 1) / 2;
            const size_t g = round_up((size_t)m * L->gate_mat, ALIGN), dn = round_up((size_t)m * L->down_mat, ALIGN);
            if (2 * g + dn <= slot_bytes)
                lo = m;
            else
                hi = m - 1;
        }
        L->cap = lo;
        L->up_off = round_up((size_t)lo * L->gate_mat, ALIGN);
        L->down_off = 2 * L->up_off;
    }
    if (L->cap < 1) {
        guild_log(GUILD_LOG_WARN, "cuda moe: layer %d: a staging slot of %.1f MiB holds none of its experts (%.1f "
                  "MiB each): not streamed", il, (double)slot_bytes / (1 << 20), (double)mats / (1 << 20));
        return;
    }
    if (L->cap > n_expert)
        L->cap = n_expert;
    L->on = true;
}

bool xs_layer_streams(const xs_t *xs, int32_t il)
{
    return il >= 0 && il < xs->n_layer && xs->lay[il].on;
}

uint64_t xs_expert_bytes(const xs_t *xs, int32_t il)
{
    const xs_lay_t *L = &xs->lay[il];
    return L->record ? L->tail : 2 * L->gate_mat + L->down_mat;
}

void xs_set_stage(xs_t *xs, struct cuda_stage *stage)
{
    xs->stage = stage;
}

static int events_create(cudaEvent_t *ev, int32_t n, unsigned flags, guild_err_t *err)
{
    for (int32_t i = 0; i < n; i++)
        if (cuda_check(cudaEventCreateWithFlags(&ev[i], flags), "create event", err) < 0)
            return -1;
    return 0;
}

static void events_destroy(cudaEvent_t *ev, int32_t n)
{
    for (int32_t i = 0; ev && i < n; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
}

int xs_new(xs_t **out, const xs_layer_desc_t *layers, int32_t n_layer, int32_t n_expert, size_t slot_bytes,
           int32_t n_slots, struct cuda_stage *stage, size_t *bytes, guild_err_t *err)
{
    *out = NULL;
    if (n_slots < 1 || slot_bytes < ALIGN || slot_bytes % ALIGN)
        return guild_err_set(err, "cuda moe: %d staging slots of %zu bytes", n_slots, slot_bytes);
    xs_t *xs = calloc(1, sizeof *xs);
    if (!xs)
        return guild_err_set(err, "cuda moe: out of memory");
    xs->n_layer = n_layer;
    xs->n_expert = n_expert;
    xs->n_slots = n_slots;
    xs->slot_bytes = slot_bytes;
    xs->stage = stage;
    if (!(xs->lay = calloc((size_t)n_layer, sizeof *xs->lay)))
        goto oom;
    int32_t min_cap = n_expert;
    for (int32_t il = 0; il < n_layer; il++) {
        lay_init(&xs->lay[il], &layers[il], il, n_expert, slot_bytes);
        if (xs->lay[il].on) {
            min_cap = xs->lay[il].cap < min_cap ? xs->lay[il].cap : min_cap;
            xs->max_cap = xs->lay[il].cap > xs->max_cap ? xs->lay[il].cap : xs->max_cap;
        }
    }
    xs->max_q = n_layer * ((n_expert + min_cap - 1) / min_cap);
    if (!(xs->ids = calloc((size_t)n_layer * (size_t)n_expert, sizeof *xs->ids)) ||
        !(xs->layer_wait = calloc((size_t)n_layer, sizeof *xs->layer_wait)) ||
        !(xs->q = calloc((size_t)xs->max_q + 1, sizeof *xs->q)) ||
        !(xs->pieces = calloc(3 * (size_t)(xs->max_cap + 1), sizeof *xs->pieces)) ||
        !(xs->ready = calloc((size_t)n_slots, sizeof *xs->ready)) ||
        !(xs->consumed = calloc((size_t)n_slots, sizeof *xs->consumed)) ||
        !(xs->raw = calloc((size_t)n_slots, sizeof *xs->raw)) ||
        !(xs->c0 = calloc((size_t)xs->max_q + 1, sizeof *xs->c0)) ||
        !(xs->c1 = calloc((size_t)xs->max_q + 1, sizeof *xs->c1)) ||
        !(xs->w0 = calloc((size_t)xs->max_q + 1, sizeof *xs->w0)) ||
        !(xs->w1 = calloc((size_t)xs->max_q + 1, sizeof *xs->w1)))
        goto oom;
    size_t counted = 0;
    int trc = 0;
    for (int32_t il = 0; il < n_layer && trc == 0; il++) {
        const xs_lay_t *L = &xs->lay[il];
        if (L->on && (L->gate_packed || L->up_packed))
            (void)table_for(xs, L->gate_type, L->gate_rb, &counted, err, &trc);
        if (L->on && L->down_packed && trc == 0)
            (void)table_for(xs, L->down_type, L->down_rb, &counted, err, &trc);
    }
    if (trc < 0)
        goto fail;
    if (cuda_alloc((void **)&xs->mem, (size_t)n_slots * slot_bytes, &counted, "the expert staging slots", err) < 0 ||
        cuda_check(cudaStreamCreateWithFlags(&xs->copy, cudaStreamNonBlocking), "create the copy stream", err) < 0 ||
        cuda_check(cudaStreamCreateWithFlags(&xs->unpack, cudaStreamNonBlocking), "create the unpack stream",
                   err) < 0 ||
        events_create(xs->ready, n_slots, cudaEventDisableTiming, err) < 0 ||
        events_create(xs->consumed, n_slots, cudaEventDisableTiming, err) < 0 ||
        events_create(xs->raw, n_slots, cudaEventDisableTiming, err) < 0)
        goto fail;
    if (bytes)
        *bytes += counted;
    *out = xs;
    return 0;
oom:
    guild_err_set(err, "cuda moe: out of memory");
fail:
    xs_destroy(&xs);
    return -1;
}

void xs_destroy(xs_t **pxs)
{
    xs_t *xs = *pxs;
    if (!xs)
        return;
    if (xs->copy)
        cudaStreamSynchronize(xs->copy);
    if (xs->unpack)
        cudaStreamSynchronize(xs->unpack);
    events_destroy(xs->ready, xs->n_slots);
    events_destroy(xs->consumed, xs->n_slots);
    events_destroy(xs->raw, xs->n_slots);
    events_destroy(xs->c0, xs->n_ev);
    events_destroy(xs->c1, xs->n_ev);
    events_destroy(xs->w0, xs->n_ev);
    events_destroy(xs->w1, xs->n_ev);
    if (xs->copy)
        cudaStreamDestroy(xs->copy);
    if (xs->unpack)
        cudaStreamDestroy(xs->unpack);
    cuda_free((void **)&xs->mem);
    for (int i = 0; i < xs->n_tab; i++)
        cuda_free((void **)&xs->tab[i].dev);
    free(xs->ready);
    free(xs->consumed);
    free(xs->raw);
    free(xs->c0);
    free(xs->c1);
    free(xs->w0);
    free(xs->w1);
    free(xs->pieces);
    free(xs->q);
    free(xs->ids);
    free(xs->layer_wait);
    free(xs->lay);
    free(xs);
    *pxs = NULL;
}

void xs_pass_begin(xs_t *xs)
{
    xs->n_ids = xs->n_q = 0;
    xs->copied = xs->used = xs->done = 0;
    xs->pass_bytes = 0;
    xs->unpacked = false;
}

int xs_add_layer(xs_t *xs, int32_t il, const int32_t *ids, int32_t n, int32_t rank0, guild_err_t *err)
{
    if (n <= 0)
        return 0;
    const xs_lay_t *L = &xs->lay[il];
    if (!L->on)
        return guild_err_set(err, "cuda moe: layer %d does not stream", il);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= xs->n_expert || !L->src[ids[i]].gate)
            return guild_err_set(err, "cuda moe: layer %d: expert %d does not stream", il, ids[i]);
    /* chunks of balanced sizes: ceil(n / cap) of them */
    const int32_t k = (n + L->cap - 1) / L->cap;
    GUILD_ASSERT(xs->n_q + k <= xs->max_q && xs->n_ids + n <= xs->n_layer * xs->n_expert);
    memcpy(xs->ids + xs->n_ids, ids, (size_t)n * sizeof *ids);
    int32_t at = 0;
    for (int32_t c = 0; c < k; c++) {
        const int32_t m = n / k + (c < n % k);
        xs->q[xs->n_q++] = (xs_q_t){il, rank0 + at, rank0 + at + m, xs->n_ids + at};
        at += m;
    }
    xs->n_ids += n;
    return 0;
}

/* The pieces of chunk q into its slot; the bytes in *bytes. */
static int32_t chunk_pieces(xs_t *xs, const xs_q_t *q, uint64_t *bytes)
{
    const xs_lay_t *L = &xs->lay[q->layer];
    const int32_t m = q->hi - q->lo;
    const int32_t *ids = xs->ids + q->first;
    cuda_stage_piece_t *p = xs->pieces;
    int32_t np = 0;
    *bytes = 0;
    if (L->record) {
        for (int32_t j = 0; j < m; j++) {
            const char *h = L->src[ids[j]].gate;
            const size_t dst = (size_t)j * L->stride;
            if (np && (const char *)p[np - 1].host + (dst - p[np - 1].dst_off) == h)
                p[np - 1].bytes = dst - p[np - 1].dst_off + L->tail; /* the next record of a run */
            else
                p[np++] = (cuda_stage_piece_t){h, L->tail, dst};
        }
    } else {
        for (int k = 0; k < 3; k++) {
            const size_t mat = k < 2 ? L->gate_mat : L->down_mat, base = k == 0 ? 0 : k == 1 ? L->up_off : L->down_off;
            const int32_t run0 = np;
            for (int32_t j = 0; j < m; j++) {
                const expert_host_mats_t *x = &L->src[ids[j]];
                const char *h = k == 0 ? x->gate : k == 1 ? x->up : x->down;
                const size_t dst = base + (size_t)j * mat;
                if (np > run0 && (const char *)p[np - 1].host + p[np - 1].bytes == h &&
                    p[np - 1].dst_off + p[np - 1].bytes == dst)
                    p[np - 1].bytes += mat;
                else
                    p[np++] = (cuda_stage_piece_t){h, mat, dst};
            }
        }
    }
    for (int32_t i = 0; i < np; i++)
        *bytes += p[i].bytes;
    return np;
}

/* The device's pointers of chunk q in slot base b. */
static void chunk_view(const xs_t *xs, const xs_q_t *q, const char *b, xs_chunk_t *c)
{
    const xs_lay_t *L = &xs->lay[q->layer];
    *c = (xs_chunk_t){.layer = q->layer, .lo = q->lo, .hi = q->hi, .gate = b, .up = b + L->up_off,
                      .down = b + L->down_off, .gu_stride = L->record ? L->stride : L->gate_mat,
                      .d_stride = L->record ? L->stride : L->down_mat, .gate_row = L->gate_row,
                      .down_row = L->down_row};
}

/* Restores plain rows of the chunk's packed matrices on the unpack stream. */
static int chunk_unpack(xs_t *xs, const xs_q_t *q, char *b, guild_err_t *err)
{
    const xs_lay_t *L = &xs->lay[q->layer];
    xs_chunk_t c;
    chunk_view(xs, q, b, &c);
    const int32_t m = q->hi - q->lo;
    const struct {
        bool packed;
        const char *base;
        size_t stride, rb;
        int64_t rows;
        guild_type_t type;
    } mats[3] = {{L->gate_packed, c.gate, c.gu_stride, L->gate_rb, L->n_ff, L->gate_type},
                 {L->up_packed, c.up, c.gu_stride, L->gate_rb, L->n_ff, L->gate_type},
                 {L->down_packed, c.down, c.d_stride, L->down_rb, L->n_embd, L->down_type}};
    for (int k = 0; k < 3; k++) {
        if (!mats[k].packed)
            continue;
        const kern_pack_layout_t *pl = kern_pack_layout(mats[k].type);
        if (!pl)
            return guild_err_set(err, "cuda moe: layer %d: packed experts of a type without a packed layout",
                                 q->layer);
        int trc = 0;
        const uint32_t *tab = table_for(xs, mats[k].type, mats[k].rb, NULL, err, &trc);
        if (trc < 0 || cuda_expert_unpack(pl, tab, (void *)mats[k].base, mats[k].stride, m, mats[k].rows, mats[k].rb,
                                          xs->unpack, err) < 0)
            return guild_err_prefix(err, "layer %d: ", q->layer);
    }
    return 0;
}

static int timing_events(xs_t *xs, int32_t upto, guild_err_t *err)
{
    for (; xs->n_ev < upto; xs->n_ev++)
        if (cuda_check(cudaEventCreate(&xs->c0[xs->n_ev]), "create event", err) < 0 ||
            cuda_check(cudaEventCreate(&xs->c1[xs->n_ev]), "create event", err) < 0 ||
            cuda_check(cudaEventCreate(&xs->w0[xs->n_ev]), "create event", err) < 0 ||
            cuda_check(cudaEventCreate(&xs->w1[xs->n_ev]), "create event", err) < 0)
            return -1;
    return 0;
}

/* Enqueues chunk i's copies (and unpacking) into its slot, after the slot's last reader. */
static int chunk_copy(xs_t *xs, int32_t i, guild_err_t *err)
{
    const xs_q_t *q = &xs->q[i];
    const xs_lay_t *L = &xs->lay[q->layer];
    const int32_t s = i % xs->n_slots;
    char *b = xs->mem + (size_t)s * xs->slot_bytes;
    uint64_t bytes = 0;
    const int32_t np = chunk_pieces(xs, q, &bytes);
    if (timing_events(xs, i + 1, err) < 0 ||
        cuda_check(cudaStreamWaitEvent(xs->copy, xs->consumed[s], 0), "stage wait", err) < 0 ||
        cuda_check(cudaEventRecord(xs->c0[i], xs->copy), "timing event", err) < 0 ||
        cuda_stage_copy(xs->stage, b, xs->pieces, np, xs->copy, err) < 0 ||
        cuda_check(cudaEventRecord(xs->c1[i], xs->copy), "timing event", err) < 0)
        return guild_err_prefix(err, "layer %d: streamed experts: ", q->layer);
    const bool packed = L->gate_packed || L->up_packed || L->down_packed;
    if (packed) {
        if (cuda_check(cudaEventRecord(xs->raw[s], xs->copy), "stage event", err) < 0 ||
            cuda_check(cudaStreamWaitEvent(xs->unpack, xs->raw[s], 0), "stage wait", err) < 0 ||
            chunk_unpack(xs, q, b, err) < 0 ||
            cuda_check(cudaEventRecord(xs->ready[s], xs->unpack), "stage event", err) < 0)
            return -1;
        xs->unpacked = true;
        xs->stats.unpacked++;
    } else if (cuda_check(cudaEventRecord(xs->ready[s], xs->copy), "stage event", err) < 0) {
        return -1;
    }
    xs->pass_bytes += bytes;
    xs->stats.bytes += bytes;
    xs->stats.chunks++;
    return 0;
}

int xs_pump(xs_t *xs, guild_err_t *err)
{
    while (xs->copied < xs->n_q && xs->copied < xs->done + xs->n_slots) {
        if (chunk_copy(xs, xs->copied, err) < 0)
            return -1;
        xs->copied++;
    }
    return 0;
}

int xs_next(xs_t *xs, int32_t il, cudaStream_t s, xs_chunk_t *c, guild_err_t *err)
{
    if (xs->used >= xs->n_q || xs->q[xs->used].layer != il)
        return 1;
    if (xs_pump(xs, err) < 0)
        return -1;
    const int32_t i = xs->used;
    GUILD_ASSERT(i < xs->copied && xs->done == i);
    const int32_t slot = i % xs->n_slots;
    if (cuda_check(cudaEventRecord(xs->w0[i], s), "timing event", err) < 0 ||
        cuda_check(cudaStreamWaitEvent(s, xs->ready[slot], 0), "wait for the staged experts", err) < 0 ||
        cuda_check(cudaEventRecord(xs->w1[i], s), "timing event", err) < 0)
        return -1;
    chunk_view(xs, &xs->q[i], xs->mem + (size_t)slot * xs->slot_bytes, c);
    c->index = i;
    xs->used++;
    return 0;
}

int xs_done(xs_t *xs, const xs_chunk_t *c, cudaStream_t s, guild_err_t *err)
{
    GUILD_ASSERT(c->index == xs->done);
    if (cuda_check(cudaEventRecord(xs->consumed[c->index % xs->n_slots], s), "stage event", err) < 0)
        return -1;
    xs->done++;
    return xs_pump(xs, err);
}

static double elapsed_ns(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (double)ms * 1e6;
}

void xs_pass_end(xs_t *xs, uint64_t *copy_ns, uint64_t *bytes)
{
    double c = 0, w = 0;
    for (int32_t i = 0; i < xs->copied; i++)
        c += elapsed_ns(xs->c0[i], xs->c1[i]);
    memset(xs->layer_wait, 0, (size_t)xs->n_layer * sizeof *xs->layer_wait);
    for (int32_t i = 0; i < xs->used; i++) {
        const double wi = elapsed_ns(xs->w0[i], xs->w1[i]);
        w += wi;
        xs->layer_wait[xs->q[i].layer] += wi;
    }
    if (xs->copied)
        xs->stats.passes++;
    xs->stats.copy_ns += (uint64_t)c;
    xs->stats.wait_ns += (uint64_t)w;
    if (copy_ns)
        *copy_ns = (uint64_t)c;
    if (bytes)
        *bytes = xs->pass_bytes;
    xs->copied = xs->used = xs->done = xs->n_q = 0;
}

void xs_stats(const xs_t *xs, xs_stats_t *out)
{
    *out = xs->stats;
}

double xs_layer_wait_ns(const xs_t *xs, int32_t il)
{
    return il >= 0 && il < xs->n_layer ? xs->layer_wait[il] : 0;
}

int xs_probe(xs_t *xs, int32_t il, double *bpns, guild_err_t *err)
{
    *bpns = 0;
    if (!xs_layer_streams(xs, il))
        return 0;
    const xs_lay_t *L = &xs->lay[il];
    int32_t *ids = malloc((size_t)xs->n_expert * sizeof *ids), n = 0;
    if (!ids)
        return guild_err_set(err, "cuda moe: out of memory");
    for (int32_t e = 0; e < xs->n_expert && n < L->cap; e++)
        if (L->src[e].gate)
            ids[n++] = e;
    xs_pass_begin(xs);
    int rc = xs_add_layer(xs, il, ids, n, 0, err);
    free(ids);
    if (rc < 0)
        return -1;
    cudaEvent_t e0 = NULL, e1 = NULL;
    rc = -1;
    if (cuda_check(cudaEventCreate(&e0), "create event", err) < 0 || cuda_check(cudaEventCreate(&e1), "create event", err) < 0)
        goto out;
    const xs_q_t q = xs->q[0];
    for (int rep = 0; rep < 2; rep++) { /* the first pays for first touches */
        uint64_t bytes = 0;
        const int32_t np = chunk_pieces(xs, &q, &bytes);
        const uint64_t t0 = guild_now_ns();
        float ms = 0;
        if (cuda_check(cudaEventRecord(e0, xs->copy), "probe event", err) < 0 ||
            cuda_stage_copy(xs->stage, xs->mem, xs->pieces, np, xs->copy, err) < 0 ||
            cuda_check(cudaEventRecord(e1, xs->copy), "probe event", err) < 0 ||
            cuda_check(cudaEventSynchronize(e1), "probe copy", err) < 0 ||
            cuda_check(cudaEventElapsedTime(&ms, e0, e1), "probe event", err) < 0)
            goto out;
        const double wall = (double)(guild_now_ns() - t0) / 1e6; /* the host's staging counts too */
        const double t = wall > ms ? wall : ms;
        *bpns = t > 0 ? (double)bytes / (t * 1e6) : 0;
    }
    rc = 0;
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    xs_pass_begin(xs);
    return rc;
}
