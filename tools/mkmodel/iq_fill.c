#include "tools/mkmodel/iq_fill.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "core/quant/blocks.h"
#include "core/quant/fp16.h"
#include "core/quant/iq_tables.h"
#include "core/util/err.h"

/* Sub-block scales are drawn uniformly from [lo, hi] of their integer range; real quantizers use the whole
 * range, and the upper half keeps every element's magnitude within a factor of ~2 of the others. */
#define LS4_LO 8
#define LS4_HI 15
#define LS3_LO 4
#define LS3_HI 7

/* Mean square of the elements of a grid (one byte per element; IQ1 grids are signed). */
typedef struct grid_stats {
    double ms2xxs, ms2xs, ms2s, ms3xxs, ms3s, ms1s; /* E[g^2] over uniformly drawn entries */
    uint16_t iq1_sym[2048];                         /* iq1s grid entries whose negation is also an entry */
    int n_iq1_sym;
} grid_stats_t;

static grid_stats_t stats;
static pthread_once_t stats_once = PTHREAD_ONCE_INIT;

static double ms_u8(const void *grid, int n_entries, int per_entry)
{
    const uint8_t *b = grid; /* entries are little-endian uint32/uint64: byte j is element j */
    double s = 0;
    for (int i = 0; i < n_entries * per_entry; i++)
        s += (double)b[i] * b[i];
    return s / (n_entries * per_entry);
}

static uint64_t negate8(uint64_t g)
{
    uint64_t r = 0;
    for (int j = 0; j < 8; j++)
        r |= (uint64_t)(uint8_t)(-(int8_t)(g >> (8 * j))) << (8 * j);
    return r;
}

static void stats_init(void)
{
    GUILD_ASSERT(*(const uint8_t *)&(uint16_t){1} == 1); /* tables are read byte-wise: little-endian only */
    stats.ms2xxs = ms_u8(quant_iq2xxs_grid, 256, 8);
    stats.ms2xs = ms_u8(quant_iq2xs_grid, 512, 8);
    stats.ms2s = ms_u8(quant_iq2s_grid, 1024, 8);
    stats.ms3xxs = ms_u8(quant_iq3xxs_grid, 256, 4);
    stats.ms3s = ms_u8(quant_iq3s_grid, 512, 4);
    /* The IQ1 grid is not closed under negation (its mean is ~-1e-3): drawing only from the entries whose
     * negation is present makes the expected mean exactly zero. */
    double s = 0;
    for (int i = 0; i < 2048; i++) {
        uint64_t neg = negate8(quant_iq1s_grid[i]);
        bool found = false;
        for (int k = 0; k < 2048 && !found; k++)
            found = quant_iq1s_grid[k] == neg;
        if (!found)
            continue;
        stats.iq1_sym[stats.n_iq1_sym++] = (uint16_t)i;
        for (int j = 0; j < 8; j++) {
            double v = (int8_t)(quant_iq1s_grid[i] >> (8 * j));
            s += v * v;
        }
    }
    GUILD_ASSERT(stats.n_iq1_sym > 0);
    stats.ms1s = s / (8.0 * stats.n_iq1_sym);
}

/* E[x^2] for x uniform on the integers [lo, hi], of the affine scale a + b x. */
static double ms_scale(double a, double b, int lo, int hi)
{
    double s = 0;
    for (int x = lo; x <= hi; x++)
        s += (a + b * x) * (a + b * x);
    return s / (hi - lo + 1);
}

static int draw(mkmodel_rng_t *r, int lo, int hi) { return lo + (int)mkmodel_rng_below(r, (uint32_t)(hi - lo + 1)); }

bool mkmodel_iq_fill_supported(guild_type_t type)
{
    switch (type) {
    case GUILD_TYPE_IQ2_XXS:
    case GUILD_TYPE_IQ2_XS:
    case GUILD_TYPE_IQ2_S:
    case GUILD_TYPE_IQ3_XXS:
    case GUILD_TYPE_IQ3_S:
    case GUILD_TYPE_IQ1_S:
    case GUILD_TYPE_IQ1_M:
        return true;
    default:
        return false;
    }
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Four 7-bit sign indices (each an even-parity pattern of 8 signs in ksigns_iq2xs) and a scale on top. */
static uint32_t signs_and_scale(mkmodel_rng_t *r, int ls)
{
    return (uint32_t)(mkmodel_rng_next(r) & 0x0fffffffu) | (uint32_t)ls << 28;
}

static void fill_iq2_xxs(quant_block_iq2_xxs *b, mkmodel_rng_t *r, float std)
{
    double d = std / sqrt(ms_scale(0.125, 0.25, LS4_LO, LS4_HI) * stats.ms2xxs); /* db = d (0.5 + ls) / 4 */
    b->d = quant_f32_to_f16((float)d);
    uint8_t *q = (uint8_t *)b->qs;
    for (int ib = 0; ib < 8; ib++, q += 8) {
        put_u32(q, (uint32_t)mkmodel_rng_next(r));
        put_u32(q + 4, signs_and_scale(r, draw(r, LS4_LO, LS4_HI)));
    }
}

static void fill_iq2_xs(quant_block_iq2_xs *b, mkmodel_rng_t *r, float std)
{
    double d = std / sqrt(ms_scale(0.125, 0.25, LS4_LO, LS4_HI) * stats.ms2xs);
    b->d = quant_f32_to_f16((float)d);
    for (int i = 0; i < 32; i++) {
        uint64_t u = mkmodel_rng_next(r);
        b->qs[i] = (uint16_t)((u & 511) | ((u >> 9) & 127) << 9);
    }
    for (int i = 0; i < 8; i++)
        b->scales[i] = (uint8_t)(draw(r, LS4_LO, LS4_HI) | draw(r, LS4_LO, LS4_HI) << 4);
}

static void fill_iq2_s(quant_block_iq2_s *b, mkmodel_rng_t *r, float std)
{
    double d = std / sqrt(ms_scale(0.125, 0.25, LS4_LO, LS4_HI) * stats.ms2s);
    b->d = quant_f32_to_f16((float)d);
    for (int i = 0; i < 64; i += 8) {
        uint64_t u = mkmodel_rng_next(r); /* [0, 32) low index bits, [32, 64) explicit sign bits */
        memcpy(b->qs + i, &u, 8);
    }
    for (int i = 0; i < 8; i++) {
        b->qh[i] = (uint8_t)mkmodel_rng_next(r); /* 2 high index bits for each of the 4 groups of 8 */
        b->scales[i] = (uint8_t)(draw(r, LS4_LO, LS4_HI) | draw(r, LS4_LO, LS4_HI) << 4);
    }
}

static void fill_iq3_xxs(quant_block_iq3_xxs *b, mkmodel_rng_t *r, float std)
{
    double d = std / sqrt(ms_scale(0.25, 0.5, LS4_LO, LS4_HI) * stats.ms3xxs); /* db = d (0.5 + ls) / 2 */
    b->d = quant_f32_to_f16((float)d);
    for (int i = 0; i < 64; i += 8) {
        uint64_t u = mkmodel_rng_next(r);
        memcpy(b->qs + i, &u, 8);
    }
    for (int ib = 0; ib < 8; ib++)
        put_u32(b->qs + 64 + 4 * ib, signs_and_scale(r, draw(r, LS4_LO, LS4_HI)));
}

static void fill_iq3_s(quant_block_iq3_s *b, mkmodel_rng_t *r, float std)
{
    double d = std / sqrt(ms_scale(1, 2, LS4_LO, LS4_HI) * stats.ms3s); /* db = d (1 + 2 ls) */
    b->d = quant_f32_to_f16((float)d);
    for (int i = 0; i < 64; i += 8) {
        uint64_t u = mkmodel_rng_next(r);
        memcpy(b->qs + i, &u, 8);
    }
    uint64_t u = mkmodel_rng_next(r);
    memcpy(b->qh, &u, 8);
    for (int i = 0; i < 32; i += 8) {
        u = mkmodel_rng_next(r);
        memcpy(b->signs + i, &u, 8);
    }
    for (int i = 0; i < 4; i++)
        b->scales[i] = (uint8_t)(draw(r, LS4_LO, LS4_HI) | draw(r, LS4_LO, LS4_HI) << 4);
}

/* A random symmetric IQ1 grid index (11 bits). */
static int iq1_index(mkmodel_rng_t *r) { return stats.iq1_sym[mkmodel_rng_below(r, (uint32_t)stats.n_iq1_sym)]; }

static void fill_iq1_s(quant_block_iq1_s *b, mkmodel_rng_t *r, float std)
{
    /* element = d (2 s + 1) (g + delta), delta = +-IQ1S_DELTA with a random sign: E = 0,
     * E[x^2] = d^2 E[(2s+1)^2] (E[g^2] + delta^2). */
    double delta = QUANT_IQ1S_DELTA;
    double d = std / sqrt(ms_scale(1, 2, LS3_LO, LS3_HI) * (stats.ms1s + delta * delta));
    b->d = quant_f32_to_f16((float)d);
    for (int ib = 0; ib < 8; ib++) {
        uint16_t qh = 0;
        for (int l = 0; l < 4; l++) {
            int idx = iq1_index(r);
            b->qs[4 * ib + l] = (uint8_t)idx;
            qh |= (uint16_t)((idx >> 8) << (3 * l));
        }
        qh |= (uint16_t)(draw(r, LS3_LO, LS3_HI) << 12);
        qh |= (uint16_t)((mkmodel_rng_next(r) & 1) << 15);
        b->qh[ib] = qh;
    }
}

static void fill_iq1_m(quant_block_iq1_m *b, mkmodel_rng_t *r, float std)
{
    double delta = QUANT_IQ1M_DELTA;
    double d = std / sqrt(ms_scale(1, 2, LS3_LO, LS3_HI) * (stats.ms1s + delta * delta));
    uint16_t dh = quant_f32_to_f16((float)d);
    uint16_t sc[4] = {0, 0, 0, 0};
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++) {
            int idx = iq1_index(r);
            b->qs[4 * ib + l] = (uint8_t)idx;
            /* qh[2 ib + l/2]: low nibble for even l, high for odd: 3 index bits, then the delta sign bit. */
            uint8_t nib = (uint8_t)((idx >> 8) | (mkmodel_rng_next(r) & 1) << 3);
            if (l % 2 == 0)
                b->qh[2 * ib + l / 2] = nib;
            else
                b->qh[2 * ib + l / 2] |= (uint8_t)(nib << 4);
        }
        /* Two 3-bit scales per 32 elements (one per 16), six bits per group, two groups per uint16. */
        sc[ib / 2] |= (uint16_t)((draw(r, LS3_LO, LS3_HI) | draw(r, LS3_LO, LS3_HI) << 3) << (6 * (ib % 2)));
    }
    for (int k = 0; k < 4; k++) {
        sc[k] |= (uint16_t)(((dh >> (4 * k)) & 0xf) << 12); /* the fp16 d, one nibble in each uint16's top */
        b->scales[2 * k] = (uint8_t)sc[k];
        b->scales[2 * k + 1] = (uint8_t)(sc[k] >> 8);
    }
}

void mkmodel_iq_fill_row(guild_type_t type, mkmodel_rng_t *r, float std, void *dst, int64_t n)
{
    GUILD_ASSERT(n % QUANT_QK_K == 0 && mkmodel_iq_fill_supported(type));
    pthread_once(&stats_once, stats_init);
    for (int64_t i = 0; i < n / QUANT_QK_K; i++) {
        switch (type) {
        case GUILD_TYPE_IQ2_XXS: fill_iq2_xxs((quant_block_iq2_xxs *)dst + i, r, std); break;
        case GUILD_TYPE_IQ2_XS: fill_iq2_xs((quant_block_iq2_xs *)dst + i, r, std); break;
        case GUILD_TYPE_IQ2_S: fill_iq2_s((quant_block_iq2_s *)dst + i, r, std); break;
        case GUILD_TYPE_IQ3_XXS: fill_iq3_xxs((quant_block_iq3_xxs *)dst + i, r, std); break;
        case GUILD_TYPE_IQ3_S: fill_iq3_s((quant_block_iq3_s *)dst + i, r, std); break;
        case GUILD_TYPE_IQ1_S: fill_iq1_s((quant_block_iq1_s *)dst + i, r, std); break;
        case GUILD_TYPE_IQ1_M: fill_iq1_m((quant_block_iq1_m *)dst + i, r, std); break;
        default: GUILD_ASSERT(!"unsupported type");
        }
    }
}
