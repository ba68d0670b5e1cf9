/* The order of a multi-token-prediction step (contract in mtp_step.h). */
#include "gpu-worker/dense/mtp_step.h"

int mtp_step_check(int32_t step, int32_t token, int32_t next, int32_t kv, int32_t n_vocab, int32_t n_ctx,
                   guild_err_t *err)
{
    if (token < 0 || token >= n_vocab)
        return guild_err_set(err, "mtp: token id %d is out of range (vocabulary of %d)", token, n_vocab);
    if (kv < 1)
        return guild_err_set(err, "mtp: the cache is empty (no hidden state to predict from)");
    if (step != next)
        return guild_err_set(err, "mtp: step %d asked, step %d comes next (steps run in order after a forward call)",
                             step, next);
    if (kv - 1 + step >= n_ctx)
        return guild_err_set(err, "mtp: the context is full (step %d would be at position %d of %d)", step,
                             kv - 1 + step, n_ctx);
    return 0;
}

int mtp_step_catch_up(int32_t from, int32_t kv, int32_t n_batch, const int32_t *tok, int32_t token, int32_t *tokens,
                      mtp_step_rows_fn rows, void *ctx, guild_err_t *err)
{
    for (int32_t s = from; s < kv;) {
        const int32_t n = kv - s < n_batch ? kv - s : n_batch;
        for (int32_t t = 0; t < n; t++)
            tokens[t] = s + t + 1 < kv ? tok[s + t + 1] : token;
        if (rows(ctx, s, n, tokens, s + n == kv, err) < 0)
            return -1;
        s += n;
    }
    return 0;
}
