#include "config.h"

#include "gpu-worker/dense/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/cpu/cpu_backend.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#include "core/util/hash64.h"
#include "ipc/exchange.h"
#ifdef GUILD_HAVE_CUDA
#include "gpu-worker/dense/cuda/cuda_backend.h"
#endif

static const backend_ops_t *const backends[] = {
    &cpu_backend_ops,
#ifdef GUILD_HAVE_CUDA
    &cuda_backend_ops,
#endif
};

const char *backend_names(void)
{
#ifdef GUILD_HAVE_CUDA
    return "cpu cuda";
#else
    return "cpu";
#endif
}

/* The backend called name, or NULL with err. */
static const backend_ops_t *backend_find(const char *name, guild_err_t *err)
{
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (!strcmp(backends[i]->name, name))
            return backends[i];
    guild_err_set(err, "backend \"%s\" is not built in (available: %s)", name, backend_names());
    return NULL;
}

int backend_exchange_exec_new(moe_exec_t **out, const char *name, const model_config_t *cfg, guild_exchange_t *x,
                              const moe_xchg_options_t *o, guild_err_t *err)
{
    *out = NULL;
    const backend_ops_t *ops = backend_find(name, err);
    if (!ops)
        return -1;
    const guild_exchange_shape_t *s = guild_exchange_shape(x);
    if (s->n_embd != (uint32_t)cfg->n_embd || s->n_used != (uint32_t)cfg->n_expert_used)
        return guild_err_set(err, "expert exchange: slots for width %u, top-%u; the model has %d, top-%d", s->n_embd,
                             s->n_used, cfg->n_embd, cfg->n_expert_used);
    return ops->exchange_exec ? ops->exchange_exec(out, x, o, err) : moe_xchg_new(out, x, o, err);
}

const char *backend_auto(char *why, size_t why_len)
{
    size_t at = 0;
    why[0] = '\0';
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
        if (!backends[i]->devices)
            continue;
        char w[200] = "";
        const int n = backends[i]->devices(w, sizeof w);
        if (n > 0) {
            snprintf(why, why_len, "%s: %d device%s", backends[i]->name, n, n == 1 ? "" : "s");
            return backends[i]->name;
        }
        if (at < why_len)
            at += (size_t)snprintf(why + at, why_len - at, "%s%s: %s", at ? "; " : "", backends[i]->name, w);
    }
    if (!why[0])
        snprintf(why, why_len, "this build has no GPU backend");
    return "cpu";
}

void backend_device_memory(const char *name, backend_device_mem_t *out)
{
    memset(out, 0, sizeof *out);
    guild_err_t err;
    const backend_ops_t *ops = backend_find(name, &err);
    if (ops && ops->device_memory)
        ops->device_memory(out);
}

int backend_plan_caps(const char *name)
{
    guild_err_t err;
    const backend_ops_t *ops = backend_find(name, &err);
    return ops ? (int)ops->plan_caps : -1;
}

/* Whether `ops` can follow plan p: individual resident experts and slices need their capabilities. */
static int plan_check(const backend_ops_t *ops, const gpu_plan_t *p, int32_t n_batch, guild_err_t *err)
{
    if (p->n_batch != n_batch)
        return guild_err_set(err, "backend %s: the GPU plan's chunk is %d tokens, the backend's batch %d", ops->name,
                             p->n_batch, n_batch);
    for (int32_t il = 0; il < p->n_layer && !(ops->plan_caps & GPU_PLAN_CAP_EXPERTS); il++)
        if (p->layer[il].n_resident && p->layer[il].mode != GPU_PLAN_RESIDENT)
            return guild_err_set(err, "backend %s: the GPU plan keeps %d of layer %d's experts resident; this "
                                 "backend keeps whole layers only", ops->name, p->layer[il].n_resident, il);
    if (p->stage_slots && p->stage_slot_experts < p->n_expert && !(ops->plan_caps & GPU_PLAN_CAP_SLICES))
        return guild_err_set(err, "backend %s: the GPU plan stages slices of %d experts; this backend stages whole "
                             "layers only", ops->name, p->stage_slot_experts);
    return 0;
}

int backend_new(backend_t **out, const char *name, const model_t *m, const backend_options_t *opt,
                const void *config, guild_err_t *err)
{
    *out = NULL;
    const backend_ops_t *ops = backend_find(name, err);
    if (!ops)
        return -1;
    if (opt->plan && plan_check(ops, opt->plan, opt->n_batch, err) < 0)
        return -1;
    if (opt->n_seq < 0)
        return guild_err_set(err, "backend %s: %d sequences", ops->name, opt->n_seq);
    if (opt->n_seq > 1 && !ops->forward_seq)
        return guild_err_set(err, "backend %s: runs one sequence only (%d asked: several sessions in one batch "
                             "need a backend that keeps a cache per sequence, such as cpu)", ops->name, opt->n_seq);
    if (opt->mtp) {
        const model_config_t *c = model_config(m);
        if (c->n_layer_mtp < 1)
            return guild_err_set(err, "backend %s: this %s model has no multi-token-prediction layer", ops->name,
                                 model_arch_info(c->arch)->name);
        if (!ops->mtp_step)
            return guild_err_set(err, "backend %s: does not run the multi-token-prediction layer", ops->name);
        if (opt->n_seq > 1)
            return guild_err_set(err, "backend %s: the multi-token-prediction layer runs with one sequence (%d "
                                 "asked)", ops->name, opt->n_seq);
    }
    if (ops->create(out, m, opt, config, err) < 0)
        return -1;
    (*out)->n_seq = opt->n_seq > 1 ? opt->n_seq : 1;
    return 0;
}

int backend_routing(const backend_t *b, uint64_t *counts)
{
    return b->ops->routing ? b->ops->routing(b, counts) : -1;
}

int backend_forward(backend_t *b, int32_t n_tokens, const int32_t *tokens, const int32_t *positions,
                    int32_t n_out, const int32_t *out_rows, float *logits, guild_err_t *err)
{
    return b->ops->forward(b, n_tokens, tokens, positions, n_out, out_rows, logits, err);
}

int backend_forward_seq(backend_t *b, int32_t n_tokens, const int32_t *tokens, const int32_t *seq,
                        const int32_t *positions, int32_t n_out, const int32_t *out_rows, float *logits,
                        guild_err_t *err)
{
    if (b->ops->forward_seq)
        return b->ops->forward_seq(b, n_tokens, tokens, seq, positions, n_out, out_rows, logits, err);
    for (int32_t i = 0; seq && i < n_tokens; i++)
        if (seq[i] != 0)
            return guild_err_set(err, "forward: row %d is of sequence %d; backend %s holds one", i, seq[i],
                                 b->ops->name);
    return b->ops->forward(b, n_tokens, tokens, positions, n_out, out_rows, logits, err);
}

int backend_forward_pick(backend_t *b, int32_t n_tokens, const int32_t *tokens, const int32_t *seq,
                         const int32_t *positions, int32_t n_out, const int32_t *out_rows, int32_t n_vocab,
                         const uint8_t *full, float *logits, logits_pick_t *picks, guild_err_t *err)
{
    if (b->ops->forward_pick)
        return b->ops->forward_pick(b, n_tokens, tokens, seq, positions, n_out, out_rows, full, logits, picks, err);
    if (backend_forward_seq(b, n_tokens, tokens, seq, positions, n_out, out_rows, logits, err) < 0)
        return -1;
    for (int32_t j = 0; j < n_out; j++)
        picks[j] = logits_pick(logits + (size_t)j * (size_t)n_vocab, n_vocab);
    return 0;
}

float *backend_logits_alloc(backend_t *b, size_t n)
{
    const size_t bytes = (n ? n : 1) * sizeof(float);
    return b->ops->logits_alloc ? b->ops->logits_alloc(b, bytes) : malloc(bytes);
}

void backend_logits_free(backend_t *b, float *p)
{
    if (!p)
        return;
    if (b->ops->logits_free)
        b->ops->logits_free(b, p);
    else
        free(p);
}

int32_t backend_n_seq(const backend_t *b)
{
    return b->n_seq > 1 ? b->n_seq : 1;
}

int32_t backend_kv_len(const backend_t *b)
{
    return b->ops->kv_len(b);
}

int32_t backend_seq_kv_len(const backend_t *b, int32_t seq)
{
    GUILD_ASSERT(seq >= 0 && seq < backend_n_seq(b));
    return b->ops->seq_kv_len ? b->ops->seq_kv_len(b, seq) : b->ops->kv_len(b);
}

void backend_seq_kv_truncate(backend_t *b, int32_t seq, int32_t n_pos)
{
    GUILD_ASSERT(seq >= 0 && seq < backend_n_seq(b));
    if (b->ops->seq_kv_truncate)
        b->ops->seq_kv_truncate(b, seq, n_pos);
    else
        b->ops->kv_truncate(b, n_pos);
}

void backend_kv_truncate(backend_t *b, int32_t n_pos)
{
    b->ops->kv_truncate(b, n_pos);
}

void backend_kv_clear(backend_t *b)
{
    b->ops->kv_truncate(b, 0);
}

int backend_mtp_step(backend_t *b, int32_t step, int32_t token, float *logits, guild_err_t *err)
{
    if (!b->ops->mtp_step)
        return guild_err_set(err, "%s backend: the multi-token-prediction layer is not run by it", b->ops->name);
    return b->ops->mtp_step(b, step, token, logits, err);
}

bool backend_has_snapshots(const backend_t *b)
{
    return b->ops->seq_save && b->ops->seq_load;
}

int backend_seq_save(backend_t *b, int32_t seq, int32_t n_pos, void **out, size_t *size, guild_err_t *err)
{
    *out = NULL;
    *size = 0;
    if (!backend_has_snapshots(b))
        return guild_err_set(err, "backend %s keeps no snapshots of its cache", b->ops->name);
    if (seq < 0 || seq >= backend_n_seq(b))
        return guild_err_set(err, "snapshot: sequence %d (the backend holds %d)", seq, backend_n_seq(b));
    if (n_pos < 0 || n_pos > backend_seq_kv_len(b, seq))
        return guild_err_set(err, "snapshot: %d positions of sequence %d, which holds %d", n_pos, seq,
                             backend_seq_kv_len(b, seq));
    return b->ops->seq_save(b, seq, n_pos, out, size, err);
}

int backend_seq_load(backend_t *b, int32_t seq, const int32_t *tokens, int32_t n_pos, const void *blob, size_t size,
                     guild_err_t *err)
{
    if (!backend_has_snapshots(b))
        return guild_err_set(err, "backend %s keeps no snapshots of its cache", b->ops->name);
    if (seq < 0 || seq >= backend_n_seq(b))
        return guild_err_set(err, "snapshot: sequence %d (the backend holds %d)", seq, backend_n_seq(b));
    backend_state_header_t h;
    if (size < sizeof h)
        return guild_err_set(err, "snapshot: %zu bytes, shorter than its header", size);
    memcpy(&h, blob, sizeof h);
    if (h.magic != BACKEND_STATE_MAGIC || h.version != BACKEND_STATE_VERSION)
        return guild_err_set(err, "snapshot: not a cache state (magic %#x, version %u)", h.magic, h.version);
    if (h.rows_bytes > size - sizeof h || h.state_bytes != size - sizeof h - h.rows_bytes)
        return guild_err_set(err, "snapshot: %zu bytes, its header says %llu + %llu + %zu", size,
                             (unsigned long long)h.rows_bytes, (unsigned long long)h.state_bytes, sizeof h);
    if (n_pos < 0 || n_pos > h.n_pos || (h.n_recurrent && n_pos != h.n_pos))
        return guild_err_set(err, "snapshot: %d positions asked of one holding %d%s", n_pos, h.n_pos,
                             h.n_recurrent ? " (a recurrent state is restored whole)" : "");
    return b->ops->seq_load(b, seq, tokens, n_pos, blob, size, err);
}

static uint64_t state_model_hash(const model_config_t *c)
{
    hash64_t h;
    hash64_init(&h, 0x6775696c64ull);
    const int64_t head[] = {c->n_layer, c->n_embd, c->n_vocab, c->n_head, c->n_head_kv, c->head_dim, c->head_dim_v,
                            model_recurrent(c) ? model_gdn_conv_state(c) : 0,
                            model_recurrent(c) ? model_gdn_ssm_state(c) : 0};
    hash64_update(&h, head, sizeof head);
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_cache_row_t r = model_layer_cache_row(c, il);
        const int64_t row[] = {r.k, r.v, model_layer_recurrent(c, il)};
        hash64_update(&h, row, sizeof row);
    }
    return hash64_final(&h);
}

void backend_state_rows(const model_config_t *c, int32_t kv_type, int32_t il, int32_t n_pos, size_t *k, size_t *v)
{
    const model_cache_row_t r = model_layer_cache_row(c, il);
    *k = (size_t)n_pos * (size_t)kv_elem_bytes(kv_type_k(kv_type), r.k);
    *v = (size_t)n_pos * (size_t)kv_elem_bytes(kv_type_v(kv_type), r.v);
}

backend_state_header_t backend_state_header(const model_config_t *c, int32_t kv_type, int32_t n_pos)
{
    backend_state_header_t h = {
        .magic = BACKEND_STATE_MAGIC,
        .version = BACKEND_STATE_VERSION,
        .n_pos = n_pos,
        .kv_type = kv_type,
        .n_layer = c->n_layer,
        .model_hash = state_model_hash(c),
    };
    for (int32_t il = 0; il < c->n_layer; il++) {
        size_t k, v;
        backend_state_rows(c, kv_type, il, n_pos, &k, &v);
        h.rows_bytes += k + v;
        h.n_recurrent += model_layer_recurrent(c, il);
    }
    if (h.n_recurrent)
        h.state_bytes = (size_t)h.n_recurrent * (size_t)(model_gdn_conv_state(c) + model_gdn_ssm_state(c)) *
                        sizeof(float);
    return h;
}

int backend_state_check(const model_config_t *c, int32_t kv_type, int32_t n_ctx, const void *blob, size_t size,
                        guild_err_t *err)
{
    backend_state_header_t h;
    memcpy(&h, blob, sizeof h);
    if (h.n_pos > n_ctx)
        return guild_err_set(err, "snapshot: %d positions, the context holds %d", h.n_pos, n_ctx);
    const backend_state_header_t mine = backend_state_header(c, kv_type, h.n_pos);
    if (h.model_hash != mine.model_hash || h.n_layer != mine.n_layer || h.n_recurrent != mine.n_recurrent)
        return guild_err_set(err, "snapshot: made for a model of another shape");
    if (h.kv_type != mine.kv_type)
        return guild_err_set(err, "snapshot: its cache format is %s, this backend's %s", kv_type_name(h.kv_type),
                             kv_type_name(mine.kv_type));
    if (h.rows_bytes != mine.rows_bytes || h.state_bytes != mine.state_bytes ||
        size != sizeof h + h.rows_bytes + h.state_bytes)
        return guild_err_set(err, "snapshot: %zu bytes, a snapshot of %d positions here has %llu", size, h.n_pos,
                             (unsigned long long)(sizeof h + mine.rows_bytes + mine.state_bytes));
    return 0;
}

int backend_stats(const backend_t *b, backend_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (!b->ops->stats)
        return -1;
    b->ops->stats(b, out);
    return 0;
}

void backend_destroy(backend_t **b)
{
    if (*b) {
        (*b)->ops->destroy(*b);
        *b = NULL;
    }
}
