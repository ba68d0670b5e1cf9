/* The AVX-512 level (F, BW, VL, DQ; Skylake-SP and later): kernels compiled for exactly that ISA. The integer
 * kernels come from templates shared with the VNNI level (avx512_vnni.c), instantiated here with vpmaddwd. */
#include "core/kern/table.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")

#include "core/kern/x86/avx512_util.h"
#include "core/quant/blocks.h"

#define KERN_NAME(x) x##_avx512
#define KERN_DPWSSD(acc, a, b) _mm512_add_epi32((acc), _mm512_madd_epi16((a), (b)))
#include "core/kern/x86/avx512_kquants.h"

void kern_fill_avx512(kern_table_t *t)
{
    t->matmul[GUILD_TYPE_Q4_K] = matmul_q4_K_avx512;
    t->matmul[GUILD_TYPE_Q5_K] = matmul_q5_K_avx512;
    t->matmul[GUILD_TYPE_Q6_K] = matmul_q6_K_avx512;
}
#else
void kern_fill_avx512(kern_table_t *t)
{
    (void)t;
}
#endif
