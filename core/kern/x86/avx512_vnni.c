/* The AVX-512 VNNI level (Cascade Lake, Ice Lake, Sapphire Rapids, Zen 4): the AVX-512 templates instantiated
 * with vpdpwssd / vpdpbusd. Types without a VNNI-specific gain run the AVX-512 level's kernels (table.h). */
#include "core/kern/table.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "core/kern/x86/avx512_util.h"
#include "core/quant/blocks.h"


#define KERN_NAME(x) x##_avx512vnni
#define KERN_DPWSSD(acc, a, b) _mm512_dpwssd_epi32((acc), (a), (b))
#define KERN_DPBUSD(acc, u, a) _mm512_dpbusd_epi32((acc), (u), (a))
#include "core/kern/x86/avx512_kquants.h"

/* IQ4_XS with VNNI, exact for any activation: vpdpbusd of the levels biased to unsigned (kvalues + 128) with
 * the activations, one dword per 4 elements; the bias comes back out as 128 * scale * (sum of the
 * sub-block's a), all in int32. */
#include "core/quant/iq_tables.h"

typedef struct iq4xs_w_avx512vnni {
    __m512i lev[4]; /* level + 128 per element, in the order of kq_prep_t.q */
    __m512i sc[2];  /* scale - 32 per dword (a 128-bit chunk is one sub-block) */
    __m128i s16;    /* the 8 scales - 32 as int16 */
} iq4xs_w_t_avx512vnni;

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
    const __m128i s8 = k512_iq4xs_scales(x);
    const __m512i s32 = _mm512_cvtepi8_epi32(s8);
    u->sc[0] = _mm512_permutexvar_epi32(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), s32);
    u->sc[1] = _mm512_permutexvar_epi32(_mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4), s32);
    u->s16 = _mm_cvtepi8_epi16(s8);
}

static inline __m256i iq4xs_sum8_avx512vnni(const iq4xs_w_t_avx512vnni *u, const kq_prep_t_avx512vnni *a)
{
    const __m512i zero = _mm512_setzero_si512();
    const __m512i p0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, u->lev[0], a->q[0]), u->lev[1], a->q[1]);
    const __m512i p1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, u->lev[2], a->q[2]), u->lev[3], a->q[3]);
    const __m512i acc = _mm512_add_epi32(_mm512_mullo_epi32(p0, u->sc[0]), _mm512_mullo_epi32(p1, u->sc[1]));
    /* the bias: 128 * sum_s (scale_s - 32) * sum(a over s) */
    const __m128i bias = _mm_slli_epi32(_mm_madd_epi16(u->s16, _mm256_castsi256_si128(a->bs)), 7);
    return _mm256_sub_epi32(k512_fold8_epi32(acc), _mm256_castsi128_si256(bias));
}

#include "core/kern/x86/avx512_iq4xs.h"
#include "core/kern/x86/avx512_iq.h"

/* 32-element blocks with VNNI: vpdpbusd of biased unsigned levels, exact for any activation. */
#define KERN_SIGNED_DOT(acc, w, a) _mm512_dpbusd_epi32((acc), _mm512_xor_si512((w), _mm512_set1_epi8((char)0x80)), (a))
#define KERN_SIGNED_BIAS 128
#include "core/kern/x86/avx512_b32.h"

void kern_fill_avx512_vnni(kern_table_t *t)
{
    t->matmul[GUILD_TYPE_Q4_K] = matmul_q4_K_avx512vnni;
    t->matmul[GUILD_TYPE_Q5_K] = matmul_q5_K_avx512vnni;
    t->matmul[GUILD_TYPE_Q6_K] = matmul_q6_K_avx512vnni;
    t->matmul[GUILD_TYPE_Q2_K] = matmul_q2_K_avx512vnni;
    t->matmul[GUILD_TYPE_Q3_K] = matmul_q3_K_avx512vnni;
    t->matmul[GUILD_TYPE_IQ4_XS] = matmul_iq4_xs_avx512vnni;
    fill_b32_avx512vnni(t);
    fill_iq_avx512vnni(t);
}
#else
void kern_fill_avx512_vnni(kern_table_t *t)
{
    (void)t;
}
#endif
