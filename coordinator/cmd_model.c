#include "coordinator/cmd_model.h"

#include <stdlib.h>

#include "coordinator/demo_model.h"

int cmd_model_init(cmd_model_t *cm, const char *path, guild_err_t *err)
{
    *cm = (cmd_model_t){.path = path};
    if (!path) {
        if (demo_model_path(&cm->demo_path, err) < 0)
            return -1;
        cm->path = cm->demo_path;
    }
    if (model_new(&cm->model, cm->path, err) < 0 || tok_new_from_gguf(&cm->tok, model_gguf(cm->model), err) < 0)
        return -1;
    const model_config_t *mc = model_config(cm->model);
    if (tok_n_tokens(cm->tok) > mc->n_vocab)
        return guild_err_set(err, "%s: the vocabulary has %d tokens but the model only %d rows of logits", cm->path,
                             tok_n_tokens(cm->tok), mc->n_vocab);
    return 0;
}

int32_t cmd_model_n_ctx(const model_t *m, int32_t n_ctx)
{
    const int32_t train = model_config(m)->n_ctx_train;
    return n_ctx > 0 ? n_ctx : train < 4096 ? train : 4096;
}

void cmd_model_fini(cmd_model_t *cm)
{
    tok_destroy(&cm->tok);
    model_destroy(&cm->model);
    free(cm->demo_path);
    *cm = (cmd_model_t){0};
}
