#include "config.h"

#include "gpu-worker/dense/backend.h"

#include <string.h>

#include "gpu-worker/dense/cpu/cpu_backend.h"
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

int backend_new(backend_t **out, const char *name, const model_t *m, const backend_options_t *opt,
                const void *config, guild_err_t *err)
{
    *out = NULL;
    const backend_ops_t *ops = NULL;
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (!strcmp(backends[i]->name, name))
            ops = backends[i];
    if (!ops)
        return guild_err_set(err, "backend \"%s\" is not built in (available: %s)", name, backend_names());
    return ops->create(out, m, opt, config, err);
}

int backend_forward(backend_t *b, int32_t n_tokens, const int32_t *tokens, const int32_t *positions,
                    int32_t n_out, const int32_t *out_rows, float *logits, guild_err_t *err)
{
    return b->ops->forward(b, n_tokens, tokens, positions, n_out, out_rows, logits, err);
}

int32_t backend_kv_len(const backend_t *b)
{
    return b->ops->kv_len(b);
}

void backend_kv_truncate(backend_t *b, int32_t n_pos)
{
    b->ops->kv_truncate(b, n_pos);
}

void backend_kv_clear(backend_t *b)
{
    b->ops->kv_truncate(b, 0);
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
