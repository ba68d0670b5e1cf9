#include "cpu-expert-worker/expert_matmul.h"

#include <string.h>

#include "core/quant/quant.h"
#include "core/util/err.h"

void expert_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                   const void *act, size_t act_stride, float *out, size_t ldo)
{
    for (int64_t r = 0; r < nrows; r++) {
        const void *row = (const char *)w + (size_t)r * w_stride;
        for (int64_t t = 0; t < ntok; t++)
            out[(size_t)t * ldo + (size_t)r] =
                quant_vec_dot_ref(type, n, row, (const char *)act + (size_t)t * act_stride);
    }
}

void expert_quantize(guild_type_t act_type, const float *x, void *dst, int64_t n)
{
    if (act_type == GUILD_TYPE_F32) {
        memcpy(dst, x, (size_t)n * sizeof *x);
        return;
    }
    int rc = quant_quantize_row_ref(act_type, x, dst, n, NULL);
    GUILD_ASSERT(rc == 0); /* widths were checked when the weights were bound */
}
