/* The AMX kernels (amx_kernels.h) with the tile instructions replaced by the C model of amx_tile.h: the same
 * data layout, tile shapes and post-processing as amx.c, runnable on any AVX-512 VNNI CPU so that tests check
 * them bit for bit where no AMX exists. Not in any dispatch table (tests only: the model is slow). */
#include "core/kern/amx.h"

#include "core/util/err.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/kern/x86/amx_tile.h"
#include "core/kern/x86/avx512_util.h"
#include "core/quant/blocks.h"
#include "core/quant/fp16.h"
#include "core/quant/iq_tables.h"

#define AMX_NAME(x) x##_amxemu
#define AMX_CONFIG(cfg) amx_model_loadconfig(cfg)
#define AMX_RELEASE() amx_model_release()
#define AMX_ZERO(t) amx_model_zero(t)
#define AMX_LOAD(t, p, s) amx_model_load(t, p, (int64_t)(s))
#define AMX_STORE(t, p, s) amx_model_store(t, p, (int64_t)(s))
#define AMX_DPBSSD(c, a, b) amx_model_dpbssd(c, a, b)
#include "core/kern/x86/amx_kernels.h"

void kern_amx_emu_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                         size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    GUILD_ASSERT(kern_level_supported(KERN_LEVEL_AVX512_VNNI));
    GUILD_ASSERT(nrows >= 0 && ntok >= 0);
    if (nrows == 0 || ntok == 0)
        return;
    const bool covered = matmul_amxemu(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    GUILD_ASSERT(covered);
}

void kern_amx_emu_matmul_packed(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                                size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    GUILD_ASSERT(kern_level_supported(KERN_LEVEL_AVX512_VNNI));
    GUILD_ASSERT(nrows >= 0 && ntok >= 0 && nrows % KERN_PACK_ROWS == 0);
    if (nrows == 0 || ntok == 0)
        return;
    const bool covered = matmul_packed_amxemu(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    GUILD_ASSERT(covered);
}

void kern_amx_emu_sb_matmul(const kern_amx_big_t *big, bool packed, guild_type_t type, int64_t n, int64_t nrows,
                            int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out,
                            size_t ldo)
{
    GUILD_ASSERT(kern_level_supported(KERN_LEVEL_AVX512_VNNI));
    GUILD_ASSERT(nrows >= 0 && ntok >= 0 && (!packed || nrows % KERN_PACK_ROWS == 0));
    if (nrows == 0 || ntok == 0)
        return;
    const bool covered = matmul_sb_order_amxemu(big, packed, type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    GUILD_ASSERT(covered);
}
#else
void kern_amx_emu_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                         size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    (void)type, (void)n, (void)nrows, (void)ntok, (void)w, (void)w_stride, (void)act, (void)act_stride;
    (void)out, (void)ldo;
    GUILD_ASSERT(!"AMX kernels exist only on x86-64");
}

void kern_amx_emu_matmul_packed(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                                size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    (void)type, (void)n, (void)nrows, (void)ntok, (void)w, (void)w_stride, (void)act, (void)act_stride;
    (void)out, (void)ldo;
    GUILD_ASSERT(!"AMX kernels exist only on x86-64");
}

void kern_amx_emu_sb_matmul(const kern_amx_big_t *big, bool packed, guild_type_t type, int64_t n, int64_t nrows,
                            int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out,
                            size_t ldo)
{
    (void)big, (void)packed, (void)type, (void)n, (void)nrows, (void)ntok, (void)w, (void)w_stride, (void)act;
    (void)act_stride, (void)out, (void)ldo;
    GUILD_ASSERT(!"AMX kernels exist only on x86-64");
}
#endif
