/* The scalar level: the core/quant references themselves, one output element at a time. It is the fallback
 * on CPUs without the SIMD levels, for types no SIMD kernel covers, and the definition the SIMD kernels are
 * tested against. */
#include <string.h>

#include "core/kern/table.h"
#include "core/quant/quant.h"
#include "core/util/err.h"

void kern_matmul_scalar(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                        size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    /* rows outer, tokens inner: each weight row is read once for all tokens */
    for (int64_t r = 0; r < nrows; r++) {
        const char *wr = (const char *)w + (size_t)r * w_stride;
        for (int64_t t = 0; t < ntok; t++)
            out[(size_t)t * ldo + (size_t)r] =
                quant_vec_dot_ref(type, n, wr, (const char *)act + (size_t)t * act_stride);
    }
}

void kern_quantize_scalar(guild_type_t act_type, const float *x, void *dst, int64_t n)
{
    if (act_type == GUILD_TYPE_F32) {
        memcpy(dst, x, (size_t)n * sizeof *x);
        return;
    }
    guild_err_t err;
    /* kern_quantize checked the type and that n is a whole number of blocks, so this cannot fail */
    int rc = quant_quantize_row_ref(act_type, x, dst, n, &err);
    GUILD_ASSERT(rc == 0);
}
