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
    int n_parts;           /* files written (1, or the parts of a split model) */
} mkmodel_summary_t;

/* Writes the model described by cfg (validated) to cfg->out_path, or with cfg->split_max_bytes to the parts of a
 * split model, OUT-00001-of-0000N.gguf ... (OUT: out_path less .gguf), as llama.cpp's gguf-split names and keys
 * them. The vocabulary is built in, or copied from cfg->vocab_from (every tokenizer.* key; n_vocab = its token
 * count). Files that fail half-way are removed.
 * -1 with a message naming the file or tensor. summary may be NULL. */
int mkmodel_write(const mkmodel_config_t *cfg, mkmodel_progress_fn progress, void *progress_arg,
                  mkmodel_summary_t *summary, guild_err_t *err);

/* Where part k (from 0) of n goes: out itself for one part, else llama.cpp's PREFIX-%05d-of-%05d.gguf of k + 1
 * and n, PREFIX out less its .gguf. -1 when the name does not fit. */
int mkmodel_part_path(char *buf, size_t size, const char *out, int k, int n, guild_err_t *err);

#endif
