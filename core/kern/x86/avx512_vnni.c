/* The AVX-512 VNNI level (Cascade Lake, Ice Lake, Sapphire Rapids, Zen 4): the AVX-512 templates instantiated
 * with vpdpwssd / vpdpbusd. Types without a VNNI-specific gain run the AVX-512 level's kernels (table.h). */
#include "core/kern/table.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "core/kern/x86/avx512_util.h"
#include "core/quant/blocks.h"
#include "core/quant/fp16.h"


#define KERN_NAME(x) x##_avx512vnni
#define KERN_DPWSSD(acc, a, b) _mm512_dpwssd_epi32((acc), (a), (b))
#define KERN_DPBUSD(acc, u, a) _mm512_dpbusd_epi32((acc), (u), (a))
#include "core/kern/x86/avx512_kquants.h"

/* IQ4_XS with VNNI, exact for any activation: vpdpbusd of the levels biased to unsigned (kvalues + 128) with
 * the activations, one dword per 4 elements, times the scales; the bias, 128 * sum_s (scale_s - 32) * A_s with
 * A_s the sum of a over sub-block s, comes back out once per group of 16 rows (KERN_IQ4XS_GROUP_BIAS) rather
 * than per row and block, which is faster in cache (the per-block path is bound by its shuffles). All in
 * int32. */
#include "core/quant/iq_tables.h"

typedef struct iq4xs_w_avx512vnni {
    __m512i lev[4]; /* level + 128 per element, in the order of kq_prep_t.q */
    __m512i sc[2];  /* scale - 32 per dword (a 128-bit chunk is one sub-block) */
    uint64_t raw;   /* the 8 six-bit scales (0..63) as bytes, for the group's bias */
} iq4xs_w_t_avx512vnni;

/* The scales and raw of u (every level's unpack). */
static inline void iq4xs_scales_avx512vnni(const quant_block_iq4_xs *x, iq4xs_w_t_avx512vnni *u)
{
    uint32_t lo;
    memcpy(&lo, x->scales_l, 4);
    u->raw = _pdep_u64(lo, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(x->scales_h, 0x3030303030303030ull);
    const __m128i s8 = _mm_sub_epi8(_mm_cvtsi64_si128((long long)u->raw), _mm_set1_epi8(32));
    const __m512i s32 = _mm512_cvtepi8_epi32(s8);
    u->sc[0] = _mm512_permutexvar_epi32(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), s32);
    u->sc[1] = _mm512_permutexvar_epi32(_mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4), s32);
}

static inline void iq4xs_unpack_avx512vnni(const quant_block_iq4_xs *x, iq4xs_w_t_avx512vnni *u)
{
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int l = 0; l < 2; l++) {
        const __m512i q = _mm512_loadu_si512(x->qs + 64 * l);
        u->lev[2 * l] = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m4));
        u->lev[2 * l + 1] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
    }
    iq4xs_scales_avx512vnni(x, u);
}

/* 8 int32 lanes that sum to sum_s (scale_s - 32) * sum_{32 j} (kvalue + 128) * a: isum plus the bias. */
static inline __m256i iq4xs_sum8_avx512vnni(const iq4xs_w_t_avx512vnni *u, const kq_prep_t_avx512vnni *a)
{
    const __m512i zero = _mm512_setzero_si512();
    const __m512i p0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, u->lev[0], a->q[0]), u->lev[1], a->q[1]);
    const __m512i p1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, u->lev[2], a->q[2]), u->lev[3], a->q[3]);
    return k512_fold8_epi32(_mm512_add_epi32(_mm512_mullo_epi32(p0, u->sc[0]), _mm512_mullo_epi32(p1, u->sc[1])));
}

/* A token's block, for the bias: A_s = 128 hi_s + lo_s (lo_s in 0..127, hi_s in -32..32) as bytes, so that
 * vpdpbusd takes the raw scales as its unsigned operand; tot32 = 32 * sum_s A_s. */
typedef struct iq4xs_abias_avx512vnni {
    uint64_t lo, hi;
    int32_t tot32;
} iq4xs_abias_t_avx512vnni;

static inline void iq4xs_abias_avx512vnni(const kq_prep_t_avx512vnni *p, iq4xs_abias_t_avx512vnni *ab)
{
    int16_t A[16];
    uint8_t lo[8], hi[8];
    int tot = 0;
    _mm256_storeu_si256((__m256i *)A, p->bs);
    for (int s = 0; s < 8; s++) {
        const int v = A[s];
        tot += v;
        lo[s] = (uint8_t)(v & 127);
        hi[s] = (uint8_t)(int8_t)((v - (v & 127)) / 128); /* floor(v / 128) */
    }
    memcpy(&ab->lo, lo, 8);
    memcpy(&ab->hi, hi, 8);
    ab->tot32 = 32 * tot;
}

/* The bias of 16 rows (row i in lane i) from their raw scales raw[0..15]:
 * 128 * (sum_s raw_s * A_s - 32 * sum_s A_s) = 128 * sum_s (raw_s - 32) * A_s. */
static inline __m512i iq4xs_bias16_avx512vnni(const uint64_t *raw, const iq4xs_abias_t_avx512vnni *ab)
{
    const __m512i zero = _mm512_setzero_si512();
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512i lo = _mm512_set1_epi64((long long)ab->lo), hi = _mm512_set1_epi64((long long)ab->hi);
    const __m512i rA = _mm512_loadu_si512(raw), rB = _mm512_loadu_si512(raw + 8);
    /* two dwords per row: sub-blocks 0-3 and 4-7 */
    const __m512i xA = _mm512_add_epi32(_mm512_dpbusd_epi32(zero, rA, lo), _mm512_slli_epi32(_mm512_dpbusd_epi32(zero, rA, hi), 7));
    const __m512i xB = _mm512_add_epi32(_mm512_dpbusd_epi32(zero, rB, lo), _mm512_slli_epi32(_mm512_dpbusd_epi32(zero, rB, hi), 7));
    const __m512i s = _mm512_add_epi32(_mm512_permutex2var_epi32(xA, even, xB), _mm512_permutex2var_epi32(xA, odd, xB));
    return _mm512_slli_epi32(_mm512_sub_epi32(s, _mm512_set1_epi32(ab->tot32)), 7);
}

#define KERN_IQ4XS_GROUP_BIAS 1
#include "core/kern/x86/avx512_iq4xs.h"
#include "core/kern/x86/avx512_iq.h"

/* 32-element blocks with VNNI: vpdpbusd of biased unsigned levels, exact for any activation. */
#define KERN_SIGNED_DOT(acc, w, a) _mm512_dpbusd_epi32((acc), _mm512_xor_si512((w), _mm512_set1_epi8((char)0x80)), (a))
#define KERN_SIGNED_BIAS 128
#include "core/kern/x86/avx512_b32.h"

/* The packed layouts (core/kern/pack.h) */
#include "core/kern/pack.h"
#include "core/kern/x86/avx512_pack_drive.h"
#include "core/kern/x86/avx512_pack_q4k.h"
#include "core/kern/x86/avx512_pack_q6k.h"
#include "core/kern/x86/avx512_pack_q5k.h"
#include "core/kern/x86/avx512_pack_q2k.h"
#include "core/kern/x86/avx512_pack_q3k.h"
#include "core/kern/x86/avx512_pack_iq4xs.h"
#include "core/kern/x86/avx512_pack_b32.h"

/* IQ4_XS where the CPU also has AVX512_VBMI (Ice Lake, Sapphire Rapids, Zen 4): the same kernel with the
 * levels looked up by vpermb, which reads 6 index bits and needs no mask (the table is repeated 4 times, so
 * bits 4-5 of the index pick a copy), and the high nibbles brought down by vpmultishiftqb (byte k of a qword
 * <- its bits 8 k + 4 ..: the nibble in the low 4 bits, bits above it ignored the same way): 6 instructions
 * per block for the 4 level vectors instead of 10, which is faster in cache. Exact as the VNNI kernel (same
 * levels, same sums). */
#pragma GCC push_options
#pragma GCC target("avx512vbmi")
typedef kq_prep_t_avx512vnni kq_prep_t_avx512vbmi;
typedef iq4xs_w_t_avx512vnni iq4xs_w_t_avx512vbmi;
typedef iq4xs_abias_t_avx512vnni iq4xs_abias_t_avx512vbmi;

static inline int kq_tile_avx512vbmi(int64_t nb, int64_t ntok)
{
    return kq_tile_avx512vnni(nb, ntok);
}

static inline void kq_clear_tail_avx512vbmi(__m512i *st, int64_t n_vec, int nr)
{
    kq_clear_tail_avx512vnni(st, n_vec, nr);
}

static inline void iq4xs_abias_avx512vbmi(const kq_prep_t_avx512vnni *p, iq4xs_abias_t_avx512vnni *ab)
{
    iq4xs_abias_avx512vnni(p, ab);
}

static inline __m512i iq4xs_bias16_avx512vbmi(const uint64_t *raw, const iq4xs_abias_t_avx512vnni *ab)
{
    return iq4xs_bias16_avx512vnni(raw, ab);
}

static inline __m256i iq4xs_sum8_avx512vbmi(const iq4xs_w_t_avx512vnni *u, const kq_prep_t_avx512vnni *a)
{
    return iq4xs_sum8_avx512vnni(u, a);
}

static inline void iq4xs_unpack_avx512vbmi(const quant_block_iq4_xs *x, iq4xs_w_t_avx512vnni *u)
{
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    const __m512i hi_ctl = _mm512_set1_epi64(0x3c342c241c140c04LL); /* bit offsets 8 k + 4 */
    for (int l = 0; l < 2; l++) {
        const __m512i q = _mm512_loadu_si512(x->qs + 64 * l);
        u->lev[2 * l] = _mm512_permutexvar_epi8(q, table);
        u->lev[2 * l + 1] = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(hi_ctl, q), table);
    }
    iq4xs_scales_avx512vnni(x, u);
}

#undef KERN_NAME
#define KERN_NAME(x) x##_avx512vbmi
#include "core/kern/x86/avx512_iq4xs.h"
#include "core/kern/x86/avx512_pack_iq4xs.h"
#pragma GCC pop_options

/* Q4_K and Q5_K where the CPU also has GFNI (Ice Lake, Sapphire Rapids, Zen 4): the same kernels with each
 * high nibble taken by one vgf2p8affineqb instead of a shift and a mask (19 vector instructions per block and
 * row instead of 21, faster in cache). Exact as the VNNI kernels. */
#pragma GCC push_options
#pragma GCC target("gfni")
typedef kq_prep_t_avx512vnni kq_prep_t_avx512gfni;

static inline int kq_tile_avx512gfni(int64_t nb, int64_t ntok)
{
    return kq_tile_avx512vnni(nb, ntok);
}

static inline void kq_clear_tail_avx512gfni(__m512i *st, int64_t n_vec, int nr)
{
    kq_clear_tail_avx512vnni(st, n_vec, nr);
}

static inline void prep_k4_avx512gfni(const quant_block_q8_K *a, int64_t nb, kq_prep_t_avx512vnni *p)
{
    prep_k4_avx512vnni(a, nb, p);
}

#undef KERN_NAME
#define KERN_NAME(x) x##_avx512gfni
#define KERN_K4_GFNI 1
#include "core/kern/x86/avx512_k4.h"
#pragma GCC pop_options

void kern_fill_avx512_vnni(kern_table_t *t)
{
    const bool gfni = __builtin_cpu_supports("gfni");
    t->matmul[GUILD_TYPE_Q4_K] = gfni ? matmul_q4_K_avx512gfni : matmul_q4_K_avx512vnni;
    t->matmul[GUILD_TYPE_Q5_K] = gfni ? matmul_q5_K_avx512gfni : matmul_q5_K_avx512vnni;
    t->matmul[GUILD_TYPE_Q6_K] = matmul_q6_K_avx512vnni;
    t->matmul[GUILD_TYPE_Q2_K] = matmul_q2_K_avx512vnni;
    t->matmul[GUILD_TYPE_Q3_K] = matmul_q3_K_avx512vnni;
    t->matmul[GUILD_TYPE_IQ4_XS] =
        __builtin_cpu_supports("avx512vbmi") ? matmul_iq4_xs_avx512vbmi : matmul_iq4_xs_avx512vnni;
    fill_b32_avx512vnni(t);
    fill_iq_avx512vnni(t);
    t->matmul_packed[GUILD_TYPE_Q4_K] = matmul_q4_K_packed_avx512vnni;
    t->matmul_packed[GUILD_TYPE_Q6_K] = matmul_q6_K_packed_avx512vnni;
    t->matmul_packed[GUILD_TYPE_Q5_K] = matmul_q5_K_packed_avx512vnni;
    t->matmul_packed[GUILD_TYPE_Q2_K] = matmul_q2_K_packed_avx512vnni;
    t->matmul_packed[GUILD_TYPE_Q3_K] = matmul_q3_K_packed_avx512vnni;
    t->matmul_packed[GUILD_TYPE_IQ4_XS] = __builtin_cpu_supports("avx512vbmi") ? matmul_iq4_xs_packed_avx512vbmi
                                                                              : matmul_iq4_xs_packed_avx512vnni;
    t->matmul_packed[GUILD_TYPE_Q4_0] = matmul_q4_0_packed_avx512vnni;
    t->matmul_packed[GUILD_TYPE_IQ4_NL] = matmul_iq4_nl_packed_avx512vnni;
    t->matmul_packed[GUILD_TYPE_MXFP4] = matmul_mxfp4_packed_avx512vnni;
    t->matmul_packed[GUILD_TYPE_Q8_0] = matmul_q8_0_packed_avx512vnni;
    t->packed_any_tokens[GUILD_TYPE_Q4_0] = t->packed_any_tokens[GUILD_TYPE_IQ4_NL] = true;
    t->packed_any_tokens[GUILD_TYPE_MXFP4] = t->packed_any_tokens[GUILD_TYPE_Q8_0] = true;
}

int kern_avx512_vnni_variants(kern_variant_t *out, int max)
{
    kern_variant_t all[4];
    int n = 0;
    if (!kern_level_supported(KERN_LEVEL_AVX512_VNNI))
        return 0;
    if (__builtin_cpu_supports("avx512vbmi")) {
        all[n++] = (kern_variant_t){"iq4_xs avx512-vnni without vbmi", GUILD_TYPE_IQ4_XS, false, matmul_iq4_xs_avx512vnni};
        all[n++] = (kern_variant_t){"iq4_xs packed avx512-vnni without vbmi", GUILD_TYPE_IQ4_XS, true,
                                    matmul_iq4_xs_packed_avx512vnni};
    }
    if (__builtin_cpu_supports("gfni")) {
        all[n++] = (kern_variant_t){"q4_K avx512-vnni without gfni", GUILD_TYPE_Q4_K, false, matmul_q4_K_avx512vnni};
        all[n++] = (kern_variant_t){"q5_K avx512-vnni without gfni", GUILD_TYPE_Q5_K, false, matmul_q5_K_avx512vnni};
    }
    for (int i = 0; i < n && i < max; i++)
        out[i] = all[i];
    return n < max ? n : max;
}
#else
void kern_fill_avx512_vnni(kern_table_t *t)
{
    (void)t;
}

int kern_avx512_vnni_variants(kern_variant_t *out, int max)
{
    (void)out, (void)max;
    return 0;
}
#endif
