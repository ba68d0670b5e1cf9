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
                guild_err_t *err)
{
    *out = NULL;
    const backend_ops_t *ops = NULL;
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (!strcmp(backends[i]->name, name))
            ops = backends[i];
    if (!ops)
        return guild_err_set(err, "backend \"%s\" is not built in (available: %s)", name, backend_names());
    if (ops->create(out, m, opt, err) < 0)
        return -1;
    /* a backend that ignores gpu_resident (no device experts) must not leave those layers to nobody; the one
     * that reads it checks each layer itself */
    int32_t required = 0;
    for (int32_t il = 0; opt->gpu_resident && il < model_config(m)->n_layer; il++)
        required += opt->gpu_resident[il];
    backend_stats_t bs;
    if (required && (backend_stats(*out, &bs) < 0 || bs.gpu_expert_layers < required)) {
        backend_destroy(out);
        return guild_err_set(err, "backend %s: the plan leaves the experts of %d layer%s to the GPU alone, the "
                             "backend keeps %d on the device", name, required, required == 1 ? "" : "s",
                             bs.gpu_expert_layers);
    }
    return 0;
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
