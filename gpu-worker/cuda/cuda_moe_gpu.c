/* The "gpu" cuda_moe_t: the routed experts of the layers it holds live in device memory and run there, the
 * others go through a fallback bridge (CPU workers or in-process). See cuda_moe.h.
 *
 * Per resident layer and step: x quantized to the gate's dot type; pairs grouped by expert
 * (cuda_expert_route); h[p] = silu(gate_e x_t) * up_e x_t for every pair p = (t, k) in one kernel; h quantized to
 * the down matrix's dot type; y[p] = down_e h[p]. y is [n][n_used][n_embd] in pair order: what collect returns.
 * Each product is cuda_matmul's arithmetic, so y differs from the CPU workers' only through expf in SiLU. */
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/util/log.h"
#include "gpu-worker/cuda/cuda_kernels.h"
#include "gpu-worker/cuda/cuda_moe.h"
#include "gpu-worker/cuda/cuda_util.h"

#define ALIGN 256u
#define FEW_TOKENS 4 /* up to this many tokens a step: one pair per tile (mmvq-style); more: tiles of 8 pairs */

typedef struct gpu_layer {
    const char *gate, *up, *down; /* device; gate NULL: not resident */
    guild_type_t gate_type, down_type;
    size_t gate_row, gate_mat, down_row, down_mat;
} gpu_layer_t;

typedef struct moe_gpu {
    cuda_moe_t base;
    cuda_moe_t *fallback;      /* owned; layers not resident */
    gpu_layer_t *layers;       /* [n_layer] */
    int32_t n_layer, n_expert, max_tokens, n_embd, n_ff, n_used;
    void *mem;                 /* the resident expert weights */
    void *act_x;               /* [max_tokens] rows of ax_row bytes: x in the gate's dot type */
    size_t ax_row;
    float *h;                  /* [max_tokens * n_used][n_ff] */
    void *act_h;               /* [max_tokens * n_used] rows of ah_row bytes: h in the down matrix's dot type */
    size_t ah_row;
    int32_t *order;            /* [max_tokens * n_used] */
    int32_t *tiles;            /* [max tiles][4], 16-byte aligned */
    int32_t *n_tiles;          /* device int */
    float *y;                  /* [max_tokens][n_used][n_embd] */
    bool on_device;            /* the exchange in flight is computed here */
} moe_gpu_t;

static int gpu_submit(cuda_moe_t *base, int32_t layer, int32_t n, const float *x, const int32_t *ids,
                      const float *w, cudaStream_t s, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    if (layer < 0 || layer >= m->n_layer)
        return guild_err_set(err, "cuda moe: layer %d of %d", layer, m->n_layer);
    const gpu_layer_t *L = &m->layers[layer];
    m->on_device = L->gate != NULL;
    if (!m->on_device)
        return m->fallback->ops->submit(m->fallback, layer, n, x, ids, w, s, err);
    if (n < 1 || n > m->max_tokens)
        return guild_err_set(err, "cuda moe: %d tokens in an exchange (1..%d)", n, m->max_tokens);
    const int32_t tile = n <= FEW_TOKENS ? 1 : 8, pairs = n * m->n_used;
    const int32_t mt = cuda_expert_max_tiles(pairs, m->n_expert, tile);
    const guild_type_t at = quant_type_info(L->gate_type)->dot_type, ht = quant_type_info(L->down_type)->dot_type;
    if (cuda_quantize(at, x, m->n_embd, m->act_x, m->ax_row, m->n_embd, n, s, err) < 0 ||
        cuda_expert_route(ids, pairs, m->n_expert, tile, m->order, m->tiles, m->n_tiles, s, err) < 0 ||
        cuda_expert_matmul(L->gate_type, m->n_embd, m->n_ff, L->gate, L->up, L->gate_mat, L->gate_row, m->act_x,
                           m->ax_row, m->n_used, m->order, m->tiles, m->n_tiles, mt, tile, m->h, m->n_ff, s, err) < 0 ||
        cuda_quantize(ht, m->h, m->n_ff, m->act_h, m->ah_row, m->n_ff, pairs, s, err) < 0 ||
        cuda_expert_matmul(L->down_type, m->n_ff, m->n_embd, L->down, NULL, L->down_mat, L->down_row, m->act_h,
                           m->ah_row, 1, m->order, m->tiles, m->n_tiles, mt, tile, m->y, m->n_embd, s, err) < 0)
        return guild_err_prefix(err, "layer %d: device experts: ", layer);
    return 0;
}

static int gpu_collect(cuda_moe_t *base, const float **y, cudaStream_t s, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    if (!m->on_device)
        return m->fallback->ops->collect(m->fallback, y, s, err);
    *y = m->y;
    return 0;
}

static bool gpu_capturable(const cuda_moe_t *base)
{
    const moe_gpu_t *m = (const moe_gpu_t *)base;
    return !m->fallback || cuda_moe_capturable(m->fallback);
}

static int gpu_step_begin(cuda_moe_t *base, cudaStream_t s, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    return m->fallback ? cuda_moe_step_begin(m->fallback, s, err) : 0;
}

static int gpu_step_end(cuda_moe_t *base, cudaStream_t s, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    return m->fallback ? cuda_moe_step_end(m->fallback, s, err) : 0;
}

static int gpu_sync(cuda_moe_t *base, cudaEvent_t done, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    if (m->fallback)
        return cuda_moe_sync(m->fallback, done, err);
    return cuda_check(cudaEventSynchronize(done), "forward pass", err);
}

static int gpu_result(cuda_moe_t *base, guild_err_t *err)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    return m->fallback ? cuda_moe_result(m->fallback, err) : 0;
}

static void gpu_stats(const cuda_moe_t *base, cuda_moe_stats_t *out)
{
    const moe_gpu_t *m = (const moe_gpu_t *)base;
    if (m->fallback)
        cuda_moe_stats(m->fallback, out);
}

static void gpu_destroy(cuda_moe_t *base)
{
    moe_gpu_t *m = (moe_gpu_t *)base;
    cuda_moe_destroy(&m->fallback);
    void **bufs[] = {&m->mem, &m->act_x, (void **)&m->h, &m->act_h, (void **)&m->order, (void **)&m->tiles,
                     (void **)&m->n_tiles, (void **)&m->y};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        cuda_free(bufs[i]);
    free(m->layers);
    free(m);
}

static const cuda_moe_ops_t gpu_ops = {
    .name = "gpu",
    .submit = gpu_submit,
    .collect = gpu_collect,
    .destroy = gpu_destroy,
    .capturable = gpu_capturable,
    .step_begin = gpu_step_begin,
    .step_end = gpu_step_end,
    .sync = gpu_sync,
    .result = gpu_result,
    .stats = gpu_stats,
};

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* Row bytes of n elements in the dot type of `type` weights, rounded to 16; 0 when n is not whole blocks. */
static size_t dot_row(guild_type_t type, int64_t n)
{
    uint64_t b = 0;
    if (quant_row_bytes(quant_type_info(type)->dot_type, (uint64_t)n, &b, NULL) < 0)
        return 0;
    return round_up((size_t)b, 16);
}

int cuda_moe_gpu_new(cuda_moe_t **out, const cuda_moe_gpu_layer_t *layers, int32_t n_layer, int32_t n_expert,
                     int32_t max_tokens, int32_t n_embd, int32_t n_ff, int32_t n_used, cuda_moe_t *fallback,
                     size_t *bytes, guild_err_t *err)
{
    *out = NULL;
    moe_gpu_t *m = calloc(1, sizeof *m);
    if (!m) {
        cuda_moe_destroy(&fallback);
        return guild_err_set(err, "cuda moe: out of memory");
    }
    m->base.ops = &gpu_ops;
    m->fallback = fallback;
    m->n_layer = n_layer;
    m->n_expert = n_expert;
    m->max_tokens = max_tokens;
    m->n_embd = n_embd;
    m->n_ff = n_ff;
    m->n_used = n_used;
    if (!(m->layers = calloc((size_t)n_layer, sizeof *m->layers))) {
        guild_err_set(err, "cuda moe: out of memory");
        goto fail;
    }
    size_t total = 0;
    int32_t resident = 0;
    for (int32_t il = 0; il < n_layer; il++) {
        const cuda_moe_gpu_layer_t *L = &layers[il];
        if (!L->gate)
            continue;
        const size_t ax = dot_row(L->gate_type, n_embd), ah = dot_row(L->down_type, n_ff);
        if (!cuda_type_supported(L->gate_type) || !cuda_type_supported(L->down_type) || !ax || !ah) {
            guild_err_set(err, "cuda moe: layer %d: experts of types %s/%s (width %d, %d) are not supported on the "
                          "device (supported: %s)", il, quant_type_info(L->gate_type)->name,
                          quant_type_info(L->down_type)->name, n_embd, n_ff, cuda_supported_types());
            goto fail;
        }
        m->ax_row = ax > m->ax_row ? ax : m->ax_row;
        m->ah_row = ah > m->ah_row ? ah : m->ah_row;
        total += 2 * round_up(L->gate_mat * (size_t)n_expert, ALIGN) + round_up(L->down_mat * (size_t)n_expert, ALIGN);
        resident++;
    }
    if (resident < n_layer && !fallback) {
        guild_err_set(err, "cuda moe: %d of %d layers' experts are not on the device and there is no other executor",
                      n_layer - resident, n_layer);
        goto fail;
    }
    size_t counted = 0;
    const size_t T = (size_t)max_tokens, P = T * (size_t)n_used;
    const int32_t mt = cuda_expert_max_tiles((int32_t)P, n_expert, 1);
    if (cuda_alloc(&m->mem, total, &counted, "the resident expert weights", err) < 0 ||
        cuda_alloc(&m->act_x, T * m->ax_row, &counted, "expert activations", err) < 0 ||
        cuda_alloc((void **)&m->h, P * (size_t)n_ff * sizeof(float), &counted, "expert activations", err) < 0 ||
        cuda_alloc(&m->act_h, P * m->ah_row, &counted, "expert activations", err) < 0 ||
        cuda_alloc((void **)&m->order, P * sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->tiles, (size_t)mt * 4 * sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->n_tiles, sizeof(int32_t), &counted, "expert routing", err) < 0 ||
        cuda_alloc((void **)&m->y, P * (size_t)n_embd * sizeof(float), &counted, "routed expert outputs", err) < 0)
        goto fail;
    size_t off = 0;
    for (int32_t il = 0; il < n_layer; il++) {
        const cuda_moe_gpu_layer_t *L = &layers[il];
        gpu_layer_t *D = &m->layers[il];
        if (!L->gate)
            continue;
        const size_t gb = L->gate_mat * (size_t)n_expert, db = L->down_mat * (size_t)n_expert;
        char *base = (char *)m->mem + off;
        D->gate = base;
        D->up = base + round_up(gb, ALIGN);
        D->down = base + 2 * round_up(gb, ALIGN);
        off += 2 * round_up(gb, ALIGN) + round_up(db, ALIGN);
        D->gate_type = L->gate_type;
        D->down_type = L->down_type;
        D->gate_row = L->gate_row;
        D->gate_mat = L->gate_mat;
        D->down_row = L->down_row;
        D->down_mat = L->down_mat;
        if (cuda_check(cudaMemcpy((void *)D->gate, L->gate, gb, cudaMemcpyHostToDevice), "upload expert weights", err) < 0 ||
            cuda_check(cudaMemcpy((void *)D->up, L->up, gb, cudaMemcpyHostToDevice), "upload expert weights", err) < 0 ||
            cuda_check(cudaMemcpy((void *)D->down, L->down, db, cudaMemcpyHostToDevice), "upload expert weights", err) < 0)
            goto fail;
    }
    if (bytes)
        *bytes += counted;
    guild_log(GUILD_LOG_INFO, "cuda moe: experts of %d of %d layers on the device (%.1f MiB, buffers %.1f MiB)",
              resident, n_layer, (double)total / (1 << 20), (double)(counted - total) / (1 << 20));
    *out = &m->base;
    return 0;
fail:
    gpu_destroy(&m->base);
    return -1;
}
