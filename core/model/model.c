#include "core/model/model.h"

#include <stdlib.h>

struct model {
    gguf_t *gguf;
    model_config_t config;
    model_weights_t weights;
};

int model_new_from_gguf(model_t **out, gguf_t **g, guild_err_t *err)
{
    *out = NULL;
    model_t *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_destroy(g);
        return guild_err_set(err, "out of memory");
    }
    m->gguf = *g;
    *g = NULL;
    if (model_config_load(&m->config, m->gguf, err) < 0 || model_weights_bind(&m->weights, m->gguf, &m->config, err) < 0) {
        model_destroy(&m);
        return -1;
    }
    *out = m;
    return 0;
}

int model_new(model_t **out, const char *path, guild_err_t *err)
{
    gguf_t *g = NULL;
    *out = NULL;
    if (gguf_new(&g, path, err) < 0)
        return -1;
    return model_new_from_gguf(out, &g, err);
}

void model_destroy(model_t **mp)
{
    model_t *m = *mp;
    if (!m)
        return;
    model_weights_fini(&m->weights);
    gguf_destroy(&m->gguf);
    free(m);
    *mp = NULL;
}

const model_config_t *model_config(const model_t *m)
{
    return &m->config;
}

const model_weights_t *model_weights(const model_t *m)
{
    return &m->weights;
}

const gguf_t *model_gguf(const model_t *m)
{
    return m->gguf;
}
