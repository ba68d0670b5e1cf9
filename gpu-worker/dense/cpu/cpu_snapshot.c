/* The CPU backend's snapshots (backend_seq_save / backend_seq_load): a sequence's cache rows of each layer are
 * contiguous (cpu_cell), so a snapshot is one copy per layer's keys and values, then the recurrent states. */
#include "gpu-worker/dense/cpu/cpu_snapshot.h"

#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/cpu/cpu_state.h"

/* Bytes of n_pos positions' key and value rows of layer il. */
static void layer_bytes(const cpu_backend_t *b, int32_t il, int32_t n_pos, size_t *k, size_t *v)
{
    const model_cache_row_t r = model_layer_cache_row(b->cfg, il);
    *k = (size_t)n_pos * (size_t)kv_elem_bytes(b->kt, r.k);
    *v = (size_t)n_pos * (size_t)kv_elem_bytes(b->vt, r.v);
}

/* Floats of one sequence's conv and SSM states (every recurrent layer). */
static void state_floats(const cpu_backend_t *b, size_t *conv, size_t *ssm)
{
    const size_t R = (size_t)b->n_recurrent;
    *conv = R ? R * (size_t)model_gdn_conv_state(b->cfg) : 0;
    *ssm = R ? R * (size_t)model_gdn_ssm_state(b->cfg) : 0;
}

/* The header of a snapshot of n_pos positions of this backend. */
static backend_state_header_t header_of(const cpu_backend_t *b, int32_t n_pos)
{
    backend_state_header_t h = {
        .magic = BACKEND_STATE_MAGIC,
        .version = BACKEND_STATE_VERSION,
        .n_pos = n_pos,
        .kv_type = b->kv_type,
        .n_layer = b->cfg->n_layer,
        .n_recurrent = b->n_recurrent,
        .model_hash = backend_state_model_hash(b->cfg),
    };
    for (int32_t il = 0; il < b->cfg->n_layer; il++) {
        size_t k, v;
        layer_bytes(b, il, n_pos, &k, &v);
        h.rows_bytes += k + v;
    }
    size_t conv, ssm;
    state_floats(b, &conv, &ssm);
    h.state_bytes = (conv + ssm) * sizeof(float);
    return h;
}

int cpu_seq_save(backend_t *base, int32_t seq, int32_t n_pos, void **out, size_t *size, guild_err_t *err)
{
    cpu_backend_t *b = (cpu_backend_t *)base;
    if (b->n_recurrent && n_pos != b->seq_len[seq])
        return guild_err_set(err, "snapshot: a recurrent state exists at the cache's end only (%d positions), not "
                             "at %d", b->seq_len[seq], n_pos);
    const backend_state_header_t h = header_of(b, n_pos);
    const size_t total = sizeof h + (size_t)h.rows_bytes + (size_t)h.state_bytes;
    char *p = malloc(total);
    if (!p)
        return guild_err_set(err, "snapshot: out of memory for %zu bytes", total);
    memcpy(p, &h, sizeof h);
    char *at = p + sizeof h;
    for (int32_t il = 0; il < b->cfg->n_layer; il++) {
        const model_cache_row_t r = model_layer_cache_row(b->cfg, il);
        size_t k, v;
        layer_bytes(b, il, n_pos, &k, &v);
        memcpy(at, (const char *)b->k_layer[il] + cpu_cell(b, seq, 0) * kv_elem_bytes(b->kt, r.k), k);
        at += k;
        if (v)
            memcpy(at, (const char *)b->v_layer[il] + cpu_cell(b, seq, 0) * kv_elem_bytes(b->vt, r.v), v);
        at += v;
    }
    size_t conv, ssm;
    state_floats(b, &conv, &ssm);
    if (conv) {
        memcpy(at, b->conv_state + (size_t)seq * conv, conv * sizeof(float));
        at += conv * sizeof(float);
        memcpy(at, b->ssm_state + (size_t)seq * ssm, ssm * sizeof(float));
    }
    *out = p;
    *size = total;
    return 0;
}

int cpu_seq_load(backend_t *base, int32_t seq, const int32_t *tokens, int32_t n_pos, const void *blob, size_t size,
                 guild_err_t *err)
{
    cpu_backend_t *b = (cpu_backend_t *)base;
    (void)tokens;
    backend_state_header_t h;
    memcpy(&h, blob, sizeof h);
    if (h.n_pos > b->n_ctx)
        return guild_err_set(err, "snapshot: %d positions, the context holds %d", h.n_pos, b->n_ctx);
    const backend_state_header_t mine = header_of(b, h.n_pos);
    if (h.model_hash != mine.model_hash || h.n_layer != mine.n_layer || h.n_recurrent != mine.n_recurrent)
        return guild_err_set(err, "snapshot: made for a model of another shape");
    if (h.kv_type != mine.kv_type)
        return guild_err_set(err, "snapshot: its cache format is %s, this backend's %s", kv_type_name(h.kv_type),
                             kv_type_name(mine.kv_type));
    if (h.rows_bytes != mine.rows_bytes || h.state_bytes != mine.state_bytes || size != sizeof h + h.rows_bytes +
        h.state_bytes)
        return guild_err_set(err, "snapshot: %zu bytes, this backend's snapshot of %d positions has %llu", size,
                             h.n_pos, (unsigned long long)(sizeof h + mine.rows_bytes + mine.state_bytes));
    const char *at = (const char *)blob + sizeof h;
    for (int32_t il = 0; il < b->cfg->n_layer; il++) {
        const model_cache_row_t r = model_layer_cache_row(b->cfg, il);
        size_t k, v, kn, vn;
        layer_bytes(b, il, h.n_pos, &k, &v);
        layer_bytes(b, il, n_pos, &kn, &vn);
        memcpy((char *)b->k_layer[il] + cpu_cell(b, seq, 0) * kv_elem_bytes(b->kt, r.k), at, kn);
        at += k;
        if (vn)
            memcpy((char *)b->v_layer[il] + cpu_cell(b, seq, 0) * kv_elem_bytes(b->vt, r.v), at, vn);
        at += v;
    }
    size_t conv, ssm;
    state_floats(b, &conv, &ssm);
    if (conv) { /* backend_seq_load allows only the whole length here */
        memcpy(b->conv_state + (size_t)seq * conv, at, conv * sizeof(float));
        at += conv * sizeof(float);
        memcpy(b->ssm_state + (size_t)seq * ssm, at, ssm * sizeof(float));
    }
    b->seq_len[seq] = n_pos;
    return 0;
}
