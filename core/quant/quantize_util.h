/* core/quant/quantize_util.h — small helpers shared by the reference quantizers (ggml's nearest_int,
 * best_index_int8, MIN/MAX). Internal to core/quant. */
#ifndef GUILD_QUANT_QUANTIZE_UTIL_H
#define GUILD_QUANT_QUANTIZE_UTIL_H

#include <float.h>
#include <stdint.h>
#include <string.h>

#define QUANT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define QUANT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define QUANT_FLT_MAX FLT_MAX
#define QUANT_GROUP_MAX_EPS 1e-15f /* a group whose largest magnitude is below this is all zero */

/* Round to nearest, ties to even, through the float adder (as ggml does): |fval| must stay below 2^22. */
static inline int quant_nearest_int(float fval)
{
    float val = fval + 12582912.f; /* 1.5 * 2^23: the sum's mantissa holds round(fval) + 2^22 */
    int i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* Index of the level of the sorted table val[n] (n a power of two) nearest to x; a tie picks the upper
 * level. Compares 2x against sums of neighbours, which are exact, as ggml's best_index_int8 does. */
static inline int quant_best_index_int8(int n, const int8_t *val, float x)
{
    const float x2 = x + x;
    int idx = 0;
    for (int step = n >> 1; step > 0; step >>= 1) {
        const int j = idx + step;
        idx = (x2 >= (float)(val[j - 1] + val[j])) ? j : idx;
    }
    return idx;
}

#endif
