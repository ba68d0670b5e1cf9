/* The layer program of the CUDA backend: the CPU backend's (gpu-worker/dense/cpu/cpu_layer.c), composed of the
 * same parts (cuda_parts.h), each step one kernel on the backend's stream:
 *
 *   xn = rmsnorm(x, attn_norm);  x += attention part (xn);  xn = rmsnorm(x, ffn_norm);  x += FFN part (xn)
 *
 * and cuda_linear, the matrix product every part and the LM head use. The norms check the stream for NaN and
 * infinity on the device (gpu-worker/dense/finite_check.h).
 */
#include "core/quant/quant.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"

int cuda_linear(cuda_backend_t *b, const cuda_tensor_t *W, const float *x, int64_t ldx, int32_t n, float *y,
                int64_t ldy, bool reuse, guild_err_t *err)
{
    const guild_type_t at = quant_type_info(W->type)->dot_type;
    if (at == GUILD_TYPE_F32) /* the products read x itself (cuda_quantize's F32 "quantization" is a copy) */
        return cuda_matmul(W->type, W->n_in, W->n_rows, n, W->d, W->row_bytes, x, (size_t)ldx * sizeof(float), y,
                           ldy, b->stream, err);
    uint64_t row = 0;
    if (quant_row_bytes(at, (uint64_t)W->n_in, &row, err) < 0)
        return -1;
    if (!(reuse && b->act_src == x && b->act_type == at)) {
        if (cuda_quantize(at, x, ldx, b->act, b->act_row, W->n_in, n, b->stream, err) < 0)
            return -1;
        b->act_src = x;
        b->act_type = at;
    }
    return cuda_matmul(W->type, W->n_in, W->n_rows, n, W->d, W->row_bytes, b->act, b->act_row, y, ldy, b->stream,
                       err);
}

int cuda_layer_forward(cuda_backend_t *b, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    const int64_t E = c->n_embd;
    const model_layer_parts_t lp = model_layer_parts(c, il);
    cudaStream_t s = b->stream;
    const uint32_t site = 2 * (uint32_t)il; /* the non-finite check's (finite_check.h): NULL d_finite, none */
    if (cuda_rmsnorm_checked(b->xn, E, b->x, E, NULL, L->attn_norm.d, E, n, c->norm_eps, b->d_finite, site, s,
                             err) < 0 ||
        cuda_attn_parts[lp.attn->kind]->forward(b, lp.attn, il, n, err) < 0 ||
        cuda_rmsnorm_checked(b->xn, E, b->x, E, NULL, L->ffn_norm.d, E, n, c->norm_eps, b->d_finite, site + 1, s,
                             err) < 0 ||
        cuda_ffn_parts[lp.ffn->kind]->forward(b, &lp, il, n, err) < 0)
        return guild_err_prefix(err, "layer %d: ", il);
    return 0;
}
