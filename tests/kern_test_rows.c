/* tests/kern_test_rows.c — see kern_test_rows.h. */
#include "tests/kern_test_rows.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/quant/blocks.h"
#include "core/quant/fp16.h"
#include "core/quant/quant.h"

static uint64_t rng_state;

void kern_test_seed(uint64_t seed)
{
    rng_state = seed;
}

uint64_t kern_test_rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float kern_test_rng_float(void)
{
    return (float)((double)(kern_test_rng_next() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

uint16_t kern_test_scale_f16(void)
{
    float mag = ldexpf(1.0f + 0.5f * kern_test_rng_float(), -3 - (int)(kern_test_rng_next() % 10));
    return quant_f32_to_f16((kern_test_rng_next() & 1) ? -mag : mag);
}

void kern_test_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void kern_test_fill_blocks(guild_type_t type, uint8_t *row, int64_t n)
{
    const quant_type_info_t *info = quant_type_info((uint32_t)type);
    size_t bytes = (size_t)(n / info->block_elems) * info->block_bytes;
    for (size_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)kern_test_rng_next();
    if (type == GUILD_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) {
            float f = kern_test_rng_float() * 4.0f;
            memcpy(row + 4 * i, &f, 4);
        }
        return;
    }
    if (type == GUILD_TYPE_F16 || type == GUILD_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++)
            kern_test_put_u16(row + 2 * i, type == GUILD_TYPE_F16 ? quant_f32_to_f16(kern_test_rng_float() * 4.0f)
                                                         : quant_f32_to_bf16(kern_test_rng_float() * 4.0f));
        return;
    }
    for (size_t b = 0; b < bytes; b += info->block_bytes) {
        uint8_t *blk = row + b;
        switch (type) {
        case GUILD_TYPE_Q4_1:
        case GUILD_TYPE_Q5_1:
        case GUILD_TYPE_Q4_K:
        case GUILD_TYPE_Q5_K:
            kern_test_put_u16(blk, kern_test_scale_f16());
            kern_test_put_u16(blk + 2, kern_test_scale_f16());
            break;
        case GUILD_TYPE_Q2_K:
            kern_test_put_u16(blk + offsetof(quant_block_q2_K, d), kern_test_scale_f16());
            kern_test_put_u16(blk + offsetof(quant_block_q2_K, dmin), kern_test_scale_f16());
            break;
        case GUILD_TYPE_Q3_K:
            kern_test_put_u16(blk + offsetof(quant_block_q3_K, d), kern_test_scale_f16());
            break;
        case GUILD_TYPE_Q6_K:
            kern_test_put_u16(blk + offsetof(quant_block_q6_K, d), kern_test_scale_f16());
            break;
        case GUILD_TYPE_MXFP4: {
            /* mostly 2^-13 .. 2^2; now and then the subnormal and huge ends of E8M0 */
            static const uint8_t edge[] = {0, 1, 2, 3, 200, 254, 255};
            blk[0] = kern_test_rng_next() % 8 ? (uint8_t)(115 + kern_test_rng_next() % 16) : edge[kern_test_rng_next() % sizeof edge];
            break;
        }
        case GUILD_TYPE_IQ1_M: {
            /* the fp16 scale is the top nibbles of the four uint16 scale words */
            uint16_t d = kern_test_scale_f16();
            uint8_t *sc = blk + offsetof(quant_block_iq1_m, scales);
            for (int k = 0; k < 4; k++)
                sc[2 * k + 1] = (uint8_t)((sc[2 * k + 1] & 0x0f) | (((d >> (4 * k)) & 0xf) << 4));
            break;
        }
        default: /* every other block starts with its fp16 scale d */
            kern_test_put_u16(blk, kern_test_scale_f16());
            break;
        }
    }
}
