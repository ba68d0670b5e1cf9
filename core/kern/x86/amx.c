/* The amx level's kernels (Sapphire Rapids and later): amx_kernels.h on the tile unit. kern_fill_amx
 * (amx_table.c) puts them in the table behind the token threshold. */
#include "core/kern/amx.h"

#include "core/util/err.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")

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

/* GCC's tile intrinsics are asm statements that take the address as a plain operand: nothing tells the
 * compiler that LDTILECFG and TILELOADD read the memory behind it, so the stores that fill the configuration
 * and the B tiles could be sunk past them (or dropped as dead). The barrier makes them land first. */
#define AMX_BARRIER() __asm__ volatile("" ::: "memory")

#define AMX_NAME(x) x##_amx
#define AMX_CONFIG(cfg)                                                                                    \
    do {                                                                                                   \
        AMX_BARRIER();                                                                                     \
        _tile_loadconfig(cfg);                                                                             \
    } while (0)
#define AMX_RELEASE() _tile_release()
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, p, s)                                                                                  \
    do {                                                                                                   \
        AMX_BARRIER();                                                                                     \
        _tile_loadd(t, p, s);                                                                              \
    } while (0)
#define AMX_STORE(t, p, s) _tile_stored(t, p, s)
#define AMX_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#include "core/kern/x86/amx_kernels.h"

void kern_amx_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                     const void *act, size_t act_stride, float *out, size_t ldo)
{
    GUILD_ASSERT(kern_level_supported(KERN_LEVEL_AMX));
    GUILD_ASSERT(nrows >= 0 && ntok >= 0);
    if (nrows == 0 || ntok == 0)
        return;
    const bool covered = matmul_amx(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    GUILD_ASSERT(covered);
}

void kern_amx_matmul_packed(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                            size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    GUILD_ASSERT(kern_level_supported(KERN_LEVEL_AMX));
    GUILD_ASSERT(nrows >= 0 && ntok >= 0 && nrows % KERN_PACK_ROWS == 0);
    if (nrows == 0 || ntok == 0)
        return;
    const bool covered = matmul_packed_amx(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    GUILD_ASSERT(covered);
}

void kern_amx_sb_matmul(const kern_amx_big_t *big, bool packed, guild_type_t type, int64_t n, int64_t nrows,
                        int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out,
                        size_t ldo)
{
    GUILD_ASSERT(kern_level_supported(KERN_LEVEL_AMX));
    GUILD_ASSERT(nrows >= 0 && ntok >= 0 && (!packed || nrows % KERN_PACK_ROWS == 0));
    if (nrows == 0 || ntok == 0)
        return;
    const bool covered = matmul_sb_order_amx(big, packed, type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    GUILD_ASSERT(covered);
}
#else
void kern_amx_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                     const void *act, size_t act_stride, float *out, size_t ldo)
{
    (void)type, (void)n, (void)nrows, (void)ntok, (void)w, (void)w_stride, (void)act, (void)act_stride;
    (void)out, (void)ldo;
    GUILD_ASSERT(!"AMX kernels exist only on x86-64");
}

void kern_amx_matmul_packed(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                            size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    (void)type, (void)n, (void)nrows, (void)ntok, (void)w, (void)w_stride, (void)act, (void)act_stride;
    (void)out, (void)ldo;
    GUILD_ASSERT(!"AMX kernels exist only on x86-64");
}

void kern_amx_sb_matmul(const kern_amx_big_t *big, bool packed, guild_type_t type, int64_t n, int64_t nrows,
                        int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out,
                        size_t ldo)
{
    (void)big, (void)packed, (void)type, (void)n, (void)nrows, (void)ntok, (void)w, (void)w_stride, (void)act;
    (void)act_stride, (void)out, (void)ldo;
    GUILD_ASSERT(!"AMX kernels exist only on x86-64");
}
#endif
