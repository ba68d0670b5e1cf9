/* The multi-token-prediction layer on the CPU backend (backend_mtp_step, gpu-worker/dense/backend.h; the layer's
 * computation in core/model/weights.h: model_mtp_layer_t). Its block is block n_layer of the layer program
 * (cpu_layer.c, model_block), with a K/V cache of its own (k_layer[n_layer]); the forward driver keeps every
 * position's hidden state and token (cpu_backend.c) so that the layer takes in the positions it has not seen
 * when a draft begins:
 *
 *   row of position p:  x = eh_proj [rmsnorm(embed(token at p + 1), enorm) ; rmsnorm(h_p, hnorm)]
 *                       x = block n_layer (x) at position p
 *   the last row:       h' = x, logits = head (rmsnorm(x, head_norm))
 */
#include <string.h>

#include "core/model/activation.h"
#include "core/quant/quant.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"
#include "gpu-worker/dense/mtp_step.h"

void cpu_mtp_experts(cpu_backend_t *b, const model_layer_t *L, int32_t n)
{
    const model_config_t *c = b->cfg;
    const int64_t E = c->n_embd, F = c->n_ff_exp, K = c->n_expert_used;
    for (int32_t t = 0; t < n; t++)
        for (int64_t k = 0; k < K; k++) {
            const int32_t e = b->ids[t * K + k];
            const float *x = b->xn + t * E;
            cpu_linear(b->pool, &L->gate_exps, e, F, 1, x, E, b->mtp_g, F, b->act);
            cpu_linear(b->pool, &L->up_exps, e, F, 1, x, E, b->mtp_u, F, b->act);
            for (int64_t i = 0; i < F; i++)
                b->mtp_g[i] = model_silu(b->mtp_g[i]) * b->mtp_u[i];
            cpu_linear(b->pool, &L->down_exps, e, E, 1, b->mtp_g, F, b->mtp_y + (t * K + k) * E, E, b->act);
        }
    b->y = b->mtp_y;
}

typedef struct mtp_job {
    cpu_backend_t *b;
    const int32_t *tokens; /* [n] the token after each row's position */
    const float *const *h; /* [n] each row's hidden state */
    int32_t pos0;          /* row t is at position pos0 + t */
} mtp_job_t;

/* Row t's input to the projection: the normed embedding, then the normed hidden state. */
static void input_task(void *ctx, int64_t t, int thread)
{
    mtp_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_mtp_layer_t *M = &b->w->mtp[0];
    const model_tensor_t *te = M->embed_tokens.data ? &M->embed_tokens : &b->w->token_embd;
    const int64_t E = b->cfg->n_embd;
    const float eps = b->cfg->norm_eps;
    float *cat = b->mtp_cat + t * 2 * E, *tmp = b->proj + t * E;
    (void)thread;
    quant_dequantize_row_ref(te->type, model_tensor_row(te, 0, j->tokens[t]), tmp, E);
    cpu_rmsnorm(cat, tmp, M->enorm.data, E, eps);
    cpu_rmsnorm(cat + E, j->h[t], M->hnorm.data, E, eps);
    b->tok_seq[t] = 0;
    b->tok_pos[t] = j->pos0 + (int32_t)t;
    cpu_rope_table(&b->rope, b->tok_pos[t], b->rope_cs + t * b->cfg->n_rot);
}

/* Runs the n rows of j through the layer; with out, the last row goes on to the head: its output into mtp_hc,
 * its logits into out. */
static int run_rows(cpu_backend_t *b, mtp_job_t *j, int32_t n, float *out, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_mtp_layer_t *M = &b->w->mtp[0];
    const int64_t E = c->n_embd;
    guild_pool_run(b->pool, n, input_task, j);
    cpu_linear(b->pool, &M->eh_proj, 0, E, n, b->mtp_cat, 2 * E, b->x, E, b->act);
    const int32_t last = n - 1;
    if (cpu_layer_forward(b, c->n_layer, n, &last, out ? 1 : 0, err) < 0)
        return guild_err_prefix(err, "multi-token-prediction ");
    if (!out)
        return 0;
    memcpy(b->mtp_hc, b->x, (size_t)E * sizeof(float));
    const model_tensor_t *norm = M->head_norm.data ? &M->head_norm : &b->w->output_norm;
    const model_tensor_t *head = M->head.data ? &M->head : &b->w->output;
    if (cpu_norm_rows(b, norm, 1, 0, NULL, err) < 0)
        return -1;
    cpu_linear(b->pool, head, 0, c->n_vocab, 1, b->xn, E, out, c->n_vocab, b->act);
    return 0;
}

/* Step 0's rows of the positions the layer has not taken in (mtp_step_catch_up's): their hidden states. */
typedef struct catch_up {
    cpu_backend_t *b;
    float *logits; /* the step's: the last batch's last row's */
} catch_up_t;

static int catch_up_rows(void *ctx, int32_t pos0, int32_t n, const int32_t *tokens, bool last, guild_err_t *err)
{
    catch_up_t *cu = ctx;
    cpu_backend_t *b = cu->b;
    const int64_t E = b->cfg->n_embd;
    for (int32_t t = 0; t < n; t++)
        b->mtp_rows_h[t] = b->mtp_h + (int64_t)(pos0 + t) * E;
    b->seq_rows[0] = n;
    mtp_job_t j = {.b = b, .tokens = tokens, .h = b->mtp_rows_h, .pos0 = pos0};
    return run_rows(b, &j, n, last ? cu->logits : NULL, err);
}

int cpu_mtp_step(backend_t *base, int32_t step, int32_t token, float *logits, guild_err_t *err)
{
    cpu_backend_t *b = (cpu_backend_t *)base;
    if (!b->mtp)
        return guild_err_set(err, "mtp: the cpu backend was created without the multi-token-prediction layer");
    const int32_t kv = b->seq_len[0];
    if (mtp_step_check(step, token, b->mtp_next, kv, b->cfg->n_vocab, b->n_ctx, err) < 0)
        return -1;
    /* drafts change no output: a non-finite value in them only makes a bad draft, and the check's sites name
     * the model's layers */
    const bool check = b->check_finite;
    b->check_finite = false;
    int rc = 0;
    const float *h[1];
    mtp_job_t j = {.b = b, .h = h};
    if (step > 0) {
        h[0] = b->mtp_hc;
        j.tokens = &token;
        b->seq_rows[0] = 1; /* (MLA's automatic form counts a sequence's rows) */
        j.pos0 = kv - 1 + step;
        rc = run_rows(b, &j, 1, logits, err);
    } else {
        /* the positions the layer has not taken in, then kv - 1 with `token` */
        catch_up_t cu = {.b = b, .logits = logits};
        rc = mtp_step_catch_up(b->mtp_len, kv, b->n_batch, b->mtp_tok, token, b->mtp_rows_tok, catch_up_rows, &cu,
                               err);
        if (rc == 0)
            b->mtp_len = kv - 1; /* position kv - 1's token is not in the cache yet */
    }
    b->check_finite = check;
    if (rc < 0) {
        b->mtp_next = 0;
        return -1;
    }
    b->mtp_next = step + 1;
    return 0;
}
