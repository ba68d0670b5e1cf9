/* The CUDA backend's snapshots (backend_seq_save / backend_seq_load) of a sequence: a sequence's layer slot holds the
 * layer's rows one after another (kv_store's layout, cuda_kv_k / cuda_kv_v), so a snapshot is one copy per layer's
 * keys and values, then the sequence's recurrent states, device to host or back on the backend's stream. The bytes are the CPU backend's
 * layout (backend_state_header), so a blob moves between the backends that keep the same format. */
#include "gpu-worker/dense/cuda/cuda_snapshot.h"

#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/cuda/cuda_state.h"
#include "gpu-worker/dense/cuda/cuda_util.h"

/* Copies between a blob and the device: n bytes at blob offset *at and device address dev (to the device when
 * load). */
static int copy(cuda_backend_t *b, char *blob, size_t *at, void *dev, size_t n, bool load, guild_err_t *err)
{
    /* cudaMemcpyDefault: the caches may be mapped host RAM (the plan's kv_host) seen at a device address */
    if (n && cuda_check(load ? cudaMemcpyAsync(dev, blob + *at, n, cudaMemcpyDefault, b->stream)
                             : cudaMemcpyAsync(blob + *at, dev, n, cudaMemcpyDefault, b->stream),
                        load ? "restore a snapshot" : "take a snapshot", err) < 0)
        return -1;
    *at += n;
    return 0;
}

/* Sequence seq's rows of positions [0, n_pos) (of a snapshot holding h_pos) and its recurrent states, between blob
 * (after its header) and the device. */
static int transfer(cuda_backend_t *b, int32_t seq, char *blob, int32_t n_pos, int32_t h_pos, bool load,
                    guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    size_t at = sizeof(backend_state_header_t);
    for (int32_t il = 0; il < c->n_layer; il++) {
        size_t k, v, kn, vn;
        backend_state_rows(c, b->kv_format, il, h_pos, &k, &v);
        backend_state_rows(c, b->kv_format, il, n_pos, &kn, &vn);
        if (!k && !v)
            continue;
        size_t a = at;
        if (copy(b, blob, &a, cuda_kv_k(b, il, seq), kn, load, err) < 0)
            return -1;
        at += k;
        a = at;
        if (vn && copy(b, blob, &a, cuda_kv_v(b, il, seq), vn, load, err) < 0)
            return -1;
        at += v;
    }
    if (b->n_recurrent) {
        const size_t R = (size_t)b->n_recurrent;
        const size_t conv = R * (size_t)model_gdn_conv_state(c), ssm = R * (size_t)model_gdn_ssm_state(c);
        if (copy(b, blob, &at, b->conv_state + (size_t)seq * conv, conv * sizeof(float), load, err) < 0 ||
            copy(b, blob, &at, b->ssm_state + (size_t)seq * ssm, ssm * sizeof(float), load, err) < 0)
            return -1;
    }
    return cuda_check(cudaStreamSynchronize(b->stream), "a snapshot's copies", err);
}

int cuda_seq_save(backend_t *base, int32_t seq, int32_t n_pos, void **out, size_t *size, guild_err_t *err)
{
    cuda_backend_t *b = (cuda_backend_t *)base;
    if (b->mtp)
        return guild_err_set(err, "snapshot: the multi-token-prediction layer's hidden states are not part of one "
                             "(a backend created with mtp takes none)");
    if (b->n_recurrent && n_pos != b->seq_len[seq])
        return guild_err_set(err, "snapshot: a recurrent state exists at the cache's end only (%d positions), not "
                             "at %d", b->seq_len[seq], n_pos);
    const backend_state_header_t h = backend_state_header(b->cfg, b->kv_format, n_pos);
    const size_t total = sizeof h + (size_t)h.rows_bytes + (size_t)h.state_bytes;
    char *p = malloc(total);
    if (!p)
        return guild_err_set(err, "snapshot: out of memory for %zu bytes", total);
    memcpy(p, &h, sizeof h);
    if (transfer(b, seq, p, n_pos, n_pos, false, err) < 0) {
        free(p);
        return -1;
    }
    *out = p;
    *size = total;
    return 0;
}

int cuda_seq_load(backend_t *base, int32_t seq, const int32_t *tokens, int32_t n_pos, const void *blob, size_t size,
                  guild_err_t *err)
{
    cuda_backend_t *b = (cuda_backend_t *)base;
    (void)tokens;
    if (b->mtp)
        return guild_err_set(err, "snapshot: the multi-token-prediction layer's hidden states are not part of one "
                             "(a backend created with mtp takes none)");
    if (backend_state_check(b->cfg, b->kv_format, b->n_ctx, blob, size, err) < 0)
        return -1;
    backend_state_header_t h;
    memcpy(&h, blob, sizeof h);
    if (transfer(b, seq, (char *)blob, n_pos, h.n_pos, true, err) < 0) {
        b->seq_len[seq] = 0; /* part of it may have been copied */
        return -1;
    }
    b->seq_len[seq] = n_pos;
    if (b->rb_n)
        b->rb_n[seq] = 0;
    return 0;
}
