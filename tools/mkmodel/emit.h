/* tools/mkmodel/emit.h — generating and writing all tensor data, multi-threaded and streaming.
 *
 * The data is cut into jobs of whole rows (about 4 MiB each, at least one row). Worker threads fill jobs into a
 * ring of 2 * threads + 2 buffers; the calling thread writes the buffers in job order to the GGUF writer, so the
 * file never has to fit in memory and its bytes do not depend on the number of threads (every row is seeded by
 * itself, tools/mkmodel/fill.h). With --fill pool, the large quantized tensors are copied from per-tensor
 * pools of blocks instead (tools/mkmodel/pool.h), which the workers make together when a tensor's first job is
 * taken; the bytes still do not depend on the number of threads.
 */
#ifndef GUILD_MKMODEL_EMIT_H
#define GUILD_MKMODEL_EMIT_H

#include <stdint.h>

#include "core/gguf/gguf_writer.h"
#include "core/util/err.h"
#include "tools/mkmodel/config.h"
#include "tools/mkmodel/plan.h"

/* Called by the writing thread after each job with the data bytes written so far and the total. */
typedef void (*mkmodel_progress_fn)(uint64_t done, uint64_t total, void *arg);

/* Writes the data of every tensor of plan, in plan order, to the writers w[0..n_w): writer k takes the tensors
 * from first[k] (first[0] == 0) up to first[k + 1], which it must have declared in the same order before it
 * began (one writer: the whole model; several: the parts of a split one). -1 with a message on a write error, a
 * fill error or out of memory; the threads are joined in every case. */
int mkmodel_emit(gguf_writer_t *const *w, const int64_t *first, int n_w, const mkmodel_plan_t *plan, uint64_t seed,
                 mkmodel_fill_t fill, int threads, mkmodel_progress_fn progress, void *progress_arg, guild_err_t *err);

#endif
