/* tools/mkmodel/model.h — writing a whole synthetic model file: metadata, vocabulary, tensor infos, data. */
#ifndef GUILD_MKMODEL_MODEL_H
#define GUILD_MKMODEL_MODEL_H

#include <stdint.h>

#include "core/util/err.h"
#include "tools/mkmodel/config.h"
#include "tools/mkmodel/emit.h"

typedef struct mkmodel_summary {
    int64_t n_tensors;
    int64_t n_vocab;
    int64_t n_fallbacks;   /* tensors whose type fell back for block size */
    uint64_t data_bytes;   /* tensor data, without padding */
    uint64_t n_params;     /* elements of all tensors */
    double seconds;        /* time spent generating and writing the data */
} mkmodel_summary_t;

/* Writes the model described by cfg (validated) to cfg->out_path. The vocabulary is built in, or copied from
 * cfg->vocab_from (every tokenizer.* key; n_vocab = its token count). A file that fails half-way is removed.
 * -1 with a message naming the file or tensor. summary may be NULL. */
int mkmodel_write(const mkmodel_config_t *cfg, mkmodel_progress_fn progress, void *progress_arg,
                  mkmodel_summary_t *summary, guild_err_t *err);

#endif
