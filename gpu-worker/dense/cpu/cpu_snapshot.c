/* The CPU backend's snapshots (backend_seq_save / backend_seq_load): a sequence's cache rows of each layer are
 * contiguous (cpu_cell), so a snapshot is one copy per layer's keys and values, then the recurrent states. */
#include "gpu-worker/dense/cpu/cpu_snapshot.h"

#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/cpu/cpu_state.h"

/* Layer il's first key and value rows of sequence seq. */
static void rows_of(const cpu_backend_t *b, int32_t il, int32_t seq, char **k, char **v)
{
    const model_cache_row_t r = model_layer_cache_row(b->cfg, il);
    *k = (char *)b->k_layer[il] + cpu_cell(b, seq, 0) * kv_elem_bytes(b->kt, r.k);
    *v = r.v ? (char *)b->v_layer[il] + cpu_cell(b, seq, 0) * kv_elem_bytes(b->vt, r.v) : NULL;
}

/* Floats of one sequence's conv and SSM states (every recurrent layer). */
static void state_floats(const cpu_backend_t *b, size_t *conv, size_t *ssm)
{
    const size_t R = (size_t)b->n_recurrent;
    *conv = R ? R * (size_t)model_gdn_conv_state(b->cfg) : 0;
    *ssm = R ? R * (size_t)model_gdn_ssm_state(b->cfg) : 0;
}

int cpu_seq_save(backend_t *base, int32_t seq, int32_t n_pos, void **out, size_t *size, guild_err_t *err)
{
    cpu_backend_t *b = (cpu_backend_t *)base;
    if (b->mtp)
        return guild_err_set(err, "snapshot: the multi-token-prediction layer's hidden states are not part of one "
                             "(a backend created with mtp takes none)");
    if (b->n_recurrent && n_pos != b->seq_len[seq])
        return guild_err_set(err, "snapshot: a recurrent state exists at the cache's end only (%d positions), not "
                             "at %d", b->seq_len[seq], n_pos);
    const backend_state_header_t h = backend_state_header(b->cfg, b->kv_type, n_pos);
    const size_t total = sizeof h + (size_t)h.rows_bytes + (size_t)h.state_bytes;
    char *p = malloc(total);
    if (!p)
        return guild_err_set(err, "snapshot: out of memory for %zu bytes", total);
    memcpy(p, &h, sizeof h);
    char *at = p + sizeof h;
    for (int32_t il = 0; il < b->cfg->n_layer; il++) {
        size_t kn, vn;
        char *k, *v;
        backend_state_rows(b->cfg, b->kv_type, il, n_pos, &kn, &vn);
        rows_of(b, il, seq, &k, &v);
        memcpy(at, k, kn);
        at += kn;
        if (vn)
            memcpy(at, v, vn);
        at += vn;
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
    if (b->mtp)
        return guild_err_set(err, "snapshot: the multi-token-prediction layer's hidden states are not part of one "
                             "(a backend created with mtp takes none)");
    if (backend_state_check(b->cfg, b->kv_type, b->n_ctx, blob, size, err) < 0)
        return -1;
    backend_state_header_t h;
    memcpy(&h, blob, sizeof h);
    const char *at = (const char *)blob + sizeof h;
    for (int32_t il = 0; il < b->cfg->n_layer; il++) {
        size_t k, v, kn, vn;
        char *kd, *vd;
        backend_state_rows(b->cfg, b->kv_type, il, h.n_pos, &k, &v);
        backend_state_rows(b->cfg, b->kv_type, il, n_pos, &kn, &vn);
        rows_of(b, il, seq, &kd, &vd);
        memcpy(kd, at, kn);
        at += k;
        if (vn)
            memcpy(vd, at, vn);
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
    if (b->rb_n)
        b->rb_n[seq] = 0;
    return 0;
}
