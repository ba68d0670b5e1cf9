/* The multi-token-prediction layer on the CUDA backend (backend_mtp_step, gpu-worker/dense/backend.h; the
 * layer's computation in core/model/weights.h: model_mtp_layer_t): the CPU backend's (cpu_mtp.c) step for step,
 * on the backend's stream with its kernels. Its block is block n_layer of the layer program (cuda_layer.c), with
 * a slot of its own in the caches (kv_slot[n_layer]); its routed experts live on the device in a "gpu" executor
 * of their own (cuda_moe.h: every expert resident), since the executor the backend was given holds the model's
 * layers only. The forward driver keeps every position's hidden state on the device and its token on the host
 * (cuda_mtp_keep), so that the layer takes in the positions it has not seen when a draft begins:
 *
 *   row of position p:  x = eh_proj [rmsnorm(embed(token at p + 1), enorm) ; rmsnorm(h_p, hnorm)]
 *                       x = block n_layer (x) at position p
 *   the last row:       h' = x, logits = head (rmsnorm(x, head_norm))
 *
 * The steps run directly (not as graphs): a draft's few launches are small next to a verify step.
 */
#include <stdlib.h>
#include <string.h>

#include "core/model/activation.h"
#include "core/quant/quant.h"
#include "core/util/log.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_moe.h"
#include "gpu-worker/dense/cuda/cuda_state.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/mtp_step.h"

int cuda_mtp_setup(cuda_backend_t *b, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = model_block(b->w, c->n_layer);
    const size_t E = (size_t)c->n_embd, f = sizeof(float);
    size_t *sc = &b->bytes_scratch;
    if (!(b->mtp_tok = calloc((size_t)b->n_ctx, sizeof *b->mtp_tok)))
        return guild_err_set(err, "cuda backend: out of memory");
    if (cuda_alloc((void **)&b->mtp_h, (size_t)b->n_ctx * E * f, &b->bytes_kv, "the MTP layer's hidden states",
                   err) < 0 ||
        cuda_alloc((void **)&b->mtp_hc, E * f, sc, "the MTP layer's activations", err) < 0 ||
        cuda_alloc((void **)&b->mtp_cat, (size_t)b->n_batch * 2 * E * f, sc, "the MTP layer's activations", err) < 0)
        return -1;
    if (!L->gate_exps.data) /* a dense FFN: no experts */
        return 0;
    const model_expert_act_t act = model_expert_act_of(c);
    cuda_moe_gpu_layer_t gl = cuda_moe_gpu_layer_of(L, &act);
    gl.resident = true;
    if (L->up_exps.type != L->gate_exps.type)
        return guild_err_set(err, "cuda backend: the multi-token-prediction layer's experts: gate and up of types "
                             "%s and %s (the device kernels take one type for both)",
                             quant_type_info(L->gate_exps.type)->name, quant_type_info(L->up_exps.type)->name);
    const size_t before = b->bytes_experts;
    if (cuda_moe_gpu_new(&b->moe_mtp, &gl, 1, c->n_expert, b->n_batch, c->n_embd, c->n_ff_exp, c->n_expert_used, 0,
                         0, NULL, NULL, &b->bytes_experts, err) < 0)
        return guild_err_prefix(err, "cuda backend: the multi-token-prediction layer's experts: ");
    guild_log(GUILD_LOG_INFO, "cuda backend: the multi-token-prediction layer: experts %.1f MiB on the device, "
              "hidden states %.1f MiB", (double)(b->bytes_experts - before) / (1 << 20),
              (double)((size_t)b->n_ctx * E * f) / (1 << 20));
    return 0;
}

void cuda_mtp_free(cuda_backend_t *b)
{
    moe_exec_destroy(&b->moe_mtp);
    cuda_free((void **)&b->mtp_h);
    cuda_free((void **)&b->mtp_hc);
    cuda_free((void **)&b->mtp_cat);
    free(b->mtp_tok);
    b->mtp_tok = NULL;
}

int cuda_mtp_keep(cuda_backend_t *b, int32_t n, const int32_t *tokens, guild_err_t *err)
{
    const size_t E = (size_t)b->cfg->n_embd;
    const int32_t p0 = b->grp_len[0];
    GUILD_ASSERT(b->n_grp == 1 && b->grp_seq[0] == 0 && p0 + n <= b->n_ctx);
    memcpy(b->mtp_tok + p0, tokens, (size_t)n * sizeof *tokens);
    b->mtp_next = 0;
    return cuda_check(cudaMemcpyAsync(b->mtp_h + (size_t)p0 * E, b->x, (size_t)n * E * sizeof(float),
                                      cudaMemcpyDeviceToDevice, b->stream), "keep the hidden states", err);
}

void cuda_mtp_truncated(cuda_backend_t *b)
{
    /* the MTP layer's position p needs the token at p + 1 */
    const int32_t keep = b->seq_len[0] > 0 ? b->seq_len[0] - 1 : 0;
    if (b->mtp_len > keep)
        b->mtp_len = keep;
    b->mtp_next = 0;
}

/* Enqueues the n rows at positions pos0 .. through the layer: row t's token tokens[t] (the token after its
 * position) and hidden state h + t * n_embd (device). With logits, the last row goes on to the head: its output
 * into mtp_hc, its logits into h_logits. */
static int run_rows(cuda_backend_t *b, int32_t n, const int32_t *tokens, const float *h, int32_t pos0, bool logits,
                    guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_mtp_tensors_t *M = &b->mtp_w;
    const int64_t E = c->n_embd, V = c->n_vocab;
    const float eps = c->norm_eps;
    cudaStream_t s = b->stream;
    /* one sequence group at pos0 (cuda_state.h), its rows in order */
    b->n_grp = 1;
    b->grp_seq[0] = 0;
    b->grp_row0[0] = 0;
    b->grp_rows[0] = n;
    b->grp_len[0] = pos0;
    for (int32_t t = 0; t < n; t++) {
        b->h_tokens[t] = tokens[t];
        b->row_from[t] = b->row_to[t] = t;
        b->row_pos[t] = pos0 + t;
    }
    b->h_tokens[2 * b->n_batch] = pos0;
    b->act_src = NULL;
    float *last = b->x + (size_t)(n - 1) * (size_t)E;
    if (cuda_check(cudaMemcpyAsync(b->tokens, b->h_tokens, (3 * (size_t)b->n_batch + 1) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, s), "copy token ids", err) < 0 ||
        cuda_get_rows(M->embed.type, M->embed.d, M->embed.row_bytes, E, b->tokens, n, b->x, E, s, err) < 0 ||
        cuda_rmsnorm(b->mtp_cat, 2 * E, b->x, E, NULL, M->enorm.d, E, n, eps, s, err) < 0 ||
        cuda_rmsnorm(b->mtp_cat + E, 2 * E, h, E, NULL, M->hnorm.d, E, n, eps, s, err) < 0 ||
        cuda_linear(b, &M->eh_proj, b->mtp_cat, 2 * E, n, b->x, E, false, err) < 0)
        return -1;
    if (cuda_layer_forward(b, c->n_layer, n, err) < 0)
        return guild_err_prefix(err, "multi-token-prediction ");
    if (!logits)
        return 0;
    if (cuda_check(cudaMemcpyAsync(b->mtp_hc, last, (size_t)E * sizeof(float), cudaMemcpyDeviceToDevice, s),
                   "keep the MTP layer's output", err) < 0 ||
        cuda_rmsnorm(b->xn, E, last, E, NULL, M->head_norm.d, E, 1, eps, s, err) < 0 ||
        cuda_linear(b, &M->head, b->xn, E, 1, b->logits, V, false, err) < 0 ||
        cuda_check(cudaMemcpyAsync(b->h_logits, b->logits, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, s),
                   "copy the MTP layer's logits", err) < 0)
        return -1;
    return 0;
}

/* One batch of rows through the layer as a step of its executor, waited for. */
static int run_batch(cuda_backend_t *b, int32_t n, const int32_t *tokens, const float *h, int32_t pos0,
                     bool logits, guild_err_t *err)
{
    cudaStream_t s = b->stream;
    int rc = b->moe_mtp ? cuda_moe_step_begin(b->moe_mtp, s, err) : 0;
    if (rc == 0)
        rc = run_rows(b, n, tokens, h, pos0, logits, err);
    if (rc == 0 && b->moe_mtp)
        rc = cuda_moe_step_end(b->moe_mtp, s, err);
    if (rc == 0)
        rc = cuda_check(cudaEventRecord(b->done, s), "record event", err);
    if (rc == 0)
        rc = b->moe_mtp ? cuda_moe_sync(b->moe_mtp, b->done, err) : cuda_check(cudaEventSynchronize(b->done),
                                                                               "the MTP layer's step", err);
    if (rc == 0 && b->moe_mtp)
        rc = cuda_moe_result(b->moe_mtp, err);
    if (rc < 0)
        cudaStreamSynchronize(s);
    return rc;
}

/* Step 0's rows of the positions the layer has not taken in (mtp_step_catch_up's): their hidden states. */
static int catch_up_rows(void *ctx, int32_t pos0, int32_t n, const int32_t *tokens, bool last, guild_err_t *err)
{
    cuda_backend_t *b = ctx;
    return run_batch(b, n, tokens, b->mtp_h + (size_t)pos0 * (size_t)b->cfg->n_embd, pos0, last, err);
}

int cuda_mtp_step(backend_t *base, int32_t step, int32_t token, float *logits, guild_err_t *err)
{
    cuda_backend_t *b = (cuda_backend_t *)base;
    const model_config_t *c = b->cfg;
    if (!b->mtp)
        return guild_err_set(err, "mtp: the cuda backend was created without the multi-token-prediction layer");
    const int32_t kv = b->seq_len[0];
    if (mtp_step_check(step, token, b->mtp_next, kv, c->n_vocab, b->n_ctx, err) < 0)
        return -1;
    /* drafts change no output: a non-finite value in them only makes a bad draft, and the check's sites name
     * the model's layers */
    uint64_t *finite = b->d_finite;
    b->d_finite = NULL;
    int rc = 0;
    if (step > 0) {
        rc = run_batch(b, 1, &token, b->mtp_hc, kv - 1 + step, true, err);
    } else {
        /* the positions the layer has not taken in, then kv - 1 with `token`; the tokens staged in h_tokens,
         * which run_rows reads */
        rc = mtp_step_catch_up(b->mtp_len, kv, b->n_batch, b->mtp_tok, token, b->h_tokens, catch_up_rows, b, err);
        if (rc == 0)
            b->mtp_len = kv - 1; /* position kv - 1's token is not in the cache yet */
    }
    b->d_finite = finite;
    if (rc < 0) {
        b->mtp_next = 0;
        return -1;
    }
    memcpy(logits, b->h_logits, (size_t)c->n_vocab * sizeof *logits);
    b->mtp_next = step + 1;
    return 0;
}
