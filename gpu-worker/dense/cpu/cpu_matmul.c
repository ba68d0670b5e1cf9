#include "gpu-worker/dense/cpu/cpu_matmul.h"

#include <string.h>

#include "core/kern/kern.h"
#include "core/quant/quant.h"
#include "core/util/err.h"

/* Rows per task: enough to amortise a task hand-out, few enough to balance two to a hundred threads. */
#define ROWS_PER_TASK 16

/* The SIMD kernels of core/kern: bit-identical to the references, chosen once for this CPU. */
void cpu_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                const void *act, size_t act_stride, float *out, size_t ldo)
{
    kern_matmul(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

void cpu_quantize(guild_type_t act_type, const float *x, void *dst, int64_t n)
{
    kern_quantize(act_type, x, dst, n);
}

size_t cpu_act_row_bytes(guild_type_t type, int64_t n)
{
    uint64_t bytes = 0;
    int rc = quant_row_bytes(quant_type_info(type)->dot_type, (uint64_t)n, &bytes, NULL);
    GUILD_ASSERT(rc == 0);
    return (size_t)bytes;
}

typedef struct linear_job {
    const model_tensor_t *W;
    const void *w;    /* first row */
    int64_t n_in, nrows;
    int32_t n_tok;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
    char *act;
    size_t act_stride;
    guild_type_t act_type;
} linear_job_t;

static void quantize_task(void *ctx, int64_t t, int thread)
{
    linear_job_t *j = ctx;
    (void)thread;
    cpu_quantize(j->act_type, j->x + t * j->ldx, j->act + (size_t)t * j->act_stride, j->n_in);
}

static void rows_task(void *ctx, int64_t task, int thread)
{
    linear_job_t *j = ctx;
    (void)thread;
    int64_t r0 = task * ROWS_PER_TASK;
    int64_t nr = j->nrows - r0 < ROWS_PER_TASK ? j->nrows - r0 : ROWS_PER_TASK;
    cpu_matmul(j->W->type, j->n_in, nr, j->n_tok, (const char *)j->w + (size_t)r0 * j->W->row_bytes,
               j->W->row_bytes, j->act, j->act_stride, j->y + r0, (size_t)j->ldy);
}

void cpu_linear(guild_pool_t *pool, const model_tensor_t *W, int64_t expert, int64_t nrows, int32_t n_tok,
                const float *x, int64_t ldx, float *y, int64_t ldy, void *act)
{
    linear_job_t j = {
        .W = W,
        .w = model_tensor_row(W, expert, 0),
        .n_in = W->ne[0],
        .nrows = nrows,
        .n_tok = n_tok,
        .x = x,
        .ldx = ldx,
        .y = y,
        .ldy = ldy,
        .act = act,
        .act_stride = cpu_act_row_bytes(W->type, W->ne[0]),
        .act_type = quant_type_info(W->type)->dot_type,
    };
    guild_pool_run(pool, n_tok, quantize_task, &j);
    guild_pool_run(pool, (nrows + ROWS_PER_TASK - 1) / ROWS_PER_TASK, rows_task, &j);
}
