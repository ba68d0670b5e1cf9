/* The AVX-512 level (F, BW, VL, DQ; Skylake-SP and later): kernels compiled for exactly that ISA. The integer
 * kernels come from templates shared with the VNNI level (avx512_vnni.c), instantiated here with vpmaddwd. */
#include "core/kern/table.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq")

#include "core/kern/x86/avx512_util.h"
#include "core/quant/blocks.h"

#include "core/kern/x86/avx512_float.h"

#define KERN_NAME(x) x##_avx512
#define KERN_DPWSSD(acc, a, b) _mm512_add_epi32((acc), _mm512_madd_epi16((a), (b)))
#define KERN_DPBUSD(acc, u, a) \
    _mm512_add_epi32((acc), _mm512_madd_epi16(_mm512_maddubs_epi16((u), (a)), _mm512_set1_epi16(1)))
#include "core/kern/x86/avx512_kquants.h"

/* IQ4_XS without VNNI: vpmaddubsw of the level magnitudes (<= 127) and the activations with the level's sign
 * (|a| <= 127, as Guild's quantizers make them: pairs stay below 2^15), scaled per sub-block by vpmaddwd. */
#include "core/quant/iq_tables.h"

typedef struct iq4xs_w_avx512 {
    __m512i mag[4];     /* |level| per element, in the order of kq_prep_t.q */
    __mmask64 neg[4];   /* the level is negative */
    __m512i sc[2];      /* scale - 32 per int16 lane of the maddubs output (8 lanes per 16 elements) */
} iq4xs_w_t_avx512;

static inline void iq4xs_unpack_avx512(const quant_block_iq4_xs *x, iq4xs_w_t_avx512 *u)
{
    const __m512i mag_table = _mm512_broadcast_i32x4(_mm_abs_epi8(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl)));
    const __m512i m4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
    for (int l = 0; l < 2; l++) {
        const __m512i q = _mm512_loadu_si512(x->qs + 64 * l);
        const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        u->mag[2 * l] = _mm512_shuffle_epi8(mag_table, lo);
        u->mag[2 * l + 1] = _mm512_shuffle_epi8(mag_table, hi);
        /* kvalues_iq4nl is negative exactly for codes 0..7 */
        u->neg[2 * l] = _mm512_testn_epi8_mask(lo, eight);
        u->neg[2 * l + 1] = _mm512_testn_epi8_mask(hi, eight);
    }
    /* int16 lane k of a maddubs output covers elements 2k, 2k+1 of its vector: 128-bit chunk c = sub-block */
    const __m512i s16 = _mm512_cvtepi8_epi16(_mm256_castsi128_si256(k512_iq4xs_scales(x)));
    u->sc[0] = _mm512_permutexvar_epi16(_mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), s16);
    u->sc[1] = _mm512_permutexvar_epi16(_mm512_set_epi16(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4), s16);
}

static inline __m256i iq4xs_sum8_avx512(const iq4xs_w_t_avx512 *u, const kq_prep_t_avx512 *a)
{
    const __m512i zero = _mm512_setzero_si512();
    __m512i acc = zero;
    for (int i = 0; i < 4; i++) {
        const __m512i sa = _mm512_mask_sub_epi8(a->q[i], u->neg[i], zero, a->q[i]);
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u->mag[i], sa), u->sc[i / 2]));
    }
    return k512_fold8_epi32(acc);
}

#include "core/kern/x86/avx512_iq4xs.h"
#include "core/kern/x86/avx512_iq.h"

/* 32-element blocks without VNNI: vpmaddubsw + vpmaddwd (exact for unsigned levels <= 127); signed Q8_0 and
 * IQ4_NL levels as magnitudes with the activation's sign flipped where the level is negative. */
#define KERN_SIGNED_DOT(acc, w, a) \
    KERN_DPBUSD((acc), _mm512_abs_epi8(w), _mm512_mask_sub_epi8((a), _mm512_movepi8_mask(w), _mm512_setzero_si512(), (a)))
#define KERN_SIGNED_BIAS 0
#include "core/kern/x86/avx512_b32.h"

#include "core/kern/x86/avx512_quant.h"

void kern_fill_avx512(kern_table_t *t)
{
    t->quantize[GUILD_TYPE_Q8_K] = quantize_q8_K_avx512;
    t->matmul[GUILD_TYPE_Q4_K] = matmul_q4_K_avx512;
    t->matmul[GUILD_TYPE_Q5_K] = matmul_q5_K_avx512;
    t->matmul[GUILD_TYPE_Q6_K] = matmul_q6_K_avx512;
    t->matmul[GUILD_TYPE_Q2_K] = matmul_q2_K_avx512;
    t->matmul[GUILD_TYPE_Q3_K] = matmul_q3_K_avx512;
    t->matmul[GUILD_TYPE_IQ4_XS] = matmul_iq4_xs_avx512;
    fill_b32_avx512(t);
    t->matmul[GUILD_TYPE_F32] = matmul_f32_avx512;
    t->matmul[GUILD_TYPE_F16] = matmul_f16_avx512;
    t->matmul[GUILD_TYPE_BF16] = matmul_bf16_avx512;
    fill_iq_avx512(t);
}
#else
void kern_fill_avx512(kern_table_t *t)
{
    (void)t;
}
#endif
