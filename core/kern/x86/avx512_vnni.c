/* The AVX-512 VNNI level (Cascade Lake, Ice Lake, Sapphire Rapids, Zen 4): the AVX-512 templates instantiated
 * with vpdpwssd / vpdpbusd. Types without a VNNI-specific gain run the AVX-512 level's kernels (table.h). */
#include "core/kern/table.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "core/kern/x86/avx512_util.h"
#include "core/quant/blocks.h"


#define KERN_NAME(x) x##_avx512vnni
#define KERN_DPWSSD(acc, a, b) _mm512_dpwssd_epi32((acc), (a), (b))
#include "core/kern/x86/avx512_kquants.h"

void kern_fill_avx512_vnni(kern_table_t *t)
{
    t->matmul[GUILD_TYPE_Q4_K] = matmul_q4_K_avx512vnni;
    t->matmul[GUILD_TYPE_Q5_K] = matmul_q5_K_avx512vnni;
    t->matmul[GUILD_TYPE_Q6_K] = matmul_q6_K_avx512vnni;
}
#else
void kern_fill_avx512_vnni(kern_table_t *t)
{
    (void)t;
}
#endif
