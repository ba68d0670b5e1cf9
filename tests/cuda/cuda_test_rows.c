/* tests/cuda/cuda_test_rows.c — see cuda_test_rows.h. */
#include "tests/cuda/cuda_test_rows.h"

#include <string.h>

#include <check.h>

#include "core/quant/blocks.h"
#include "core/quant/fp16.h"
#include "core/quant/quant.h"

void cuda_test_iq_row(rng_t *r, guild_type_t type, char *w, int64_t n)
{
    uint64_t bytes = 0, bs = 0;
    ck_assert(quant_row_bytes(type, (uint64_t)n, &bytes, NULL) == 0);
    bs = bytes / (uint64_t)(n / 256);
    for (uint64_t i = 0; i < bytes; i++)
        w[i] = (char)rng_next(r);
    for (uint64_t b = 0; b < bytes; b += bs) {
        const quant_half_t d = quant_f32_to_f16((float)(1e-3 * (1 + 3 * rng_uniform(r))));
        if (type == GUILD_TYPE_IQ1_M) {
            uint8_t *sc = (uint8_t *)w + b + 48; /* qs[32], qh[16], then scales[8] */
            for (int k = 0; k < 4; k++)
                sc[2 * k + 1] = (uint8_t)((sc[2 * k + 1] & 0x0f) | ((d >> 4 * k) & 0xf) << 4);
        } else {
            memcpy(w + b, &d, 2); /* d leads the other IQ blocks */
        }
    }
}

void cuda_test_make_row(rng_t *r, guild_type_t type, const float *x, char *w, int64_t n)
{
    guild_err_t err;
    if (quant_can_quantize(type))
        ck_assert(quant_quantize_row_ref(type, x, w, n, &err) == 0);
    else
        cuda_test_iq_row(r, type, w, n);
}
