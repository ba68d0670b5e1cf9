#include "cpu-expert-worker/experts/expert_matmul.h"

#include "core/kern/kern.h"
#include "core/kern/pack.h"

/* The SIMD kernels of core/kern: bit-identical to the references, chosen once for this CPU. */
void expert_matmul(guild_type_t type, bool packed, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                   size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    if (packed) {
        GUILD_ASSERT(nrows % KERN_PACK_ROWS == 0);
        kern_matmul_packed(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
        return;
    }
    kern_matmul(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

void expert_quantize(guild_type_t act_type, const float *x, void *dst, int64_t n)
{
    kern_quantize(act_type, x, dst, n);
}
