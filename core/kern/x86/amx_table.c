/* The amx level's table: the AMX kernels (amx.c) for groups of KERN_AMX_MIN_TOKENS tokens and more, the level
 * below's kernels (avx512-vnni) for fewer (core/kern/amx.h). The packed entries stay the level below's (the
 * packed VNNI kernels, up to KERN_AMX_MIN_TOKENS - 1 tokens): kern_matmul_packed_at calls the packed AMX kernels
 * itself from KERN_AMX_MIN_TOKENS on (kern_amx_packed_covers), at every token count. */
#include "core/kern/amx.h"
#include "core/kern/table.h"

/* The entries of the level below, as the table held them before kern_fill_amx replaced them (written once,
 * under the dispatcher's pthread_once, before any kernel runs). */
static kern_matmul_fn below[GUILD_TYPE_COUNT];

static void amx_or_below(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                         size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    if (ntok >= KERN_AMX_MIN_TOKENS)
        kern_amx_matmul(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    else if (below[type])
        below[type](n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    else
        kern_matmul_scalar(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

#define AMX_ENTRY(T, TYPE)                                                                                  \
    static void matmul_##T##_amx(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,   \
                                 const void *act, size_t act_stride, float *out, size_t ldo)              \
    {                                                                                                      \
        amx_or_below(TYPE, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);                        \
    }
AMX_ENTRY(q8_0, GUILD_TYPE_Q8_0)
AMX_ENTRY(q4_0, GUILD_TYPE_Q4_0)
AMX_ENTRY(q5_0, GUILD_TYPE_Q5_0)
AMX_ENTRY(iq4_nl, GUILD_TYPE_IQ4_NL)
AMX_ENTRY(mxfp4, GUILD_TYPE_MXFP4)
AMX_ENTRY(q4_1, GUILD_TYPE_Q4_1)
AMX_ENTRY(q5_1, GUILD_TYPE_Q5_1)
AMX_ENTRY(q2_K, GUILD_TYPE_Q2_K)
AMX_ENTRY(q3_K, GUILD_TYPE_Q3_K)
AMX_ENTRY(q4_K, GUILD_TYPE_Q4_K)
AMX_ENTRY(q5_K, GUILD_TYPE_Q5_K)
AMX_ENTRY(q6_K, GUILD_TYPE_Q6_K)
AMX_ENTRY(iq4_xs, GUILD_TYPE_IQ4_XS)
#undef AMX_ENTRY

static const struct {
    guild_type_t type;
    kern_matmul_fn fn;
} entries[] = {
    {GUILD_TYPE_Q8_0, matmul_q8_0_amx},   {GUILD_TYPE_Q4_0, matmul_q4_0_amx}, {GUILD_TYPE_Q5_0, matmul_q5_0_amx},
    {GUILD_TYPE_IQ4_NL, matmul_iq4_nl_amx}, {GUILD_TYPE_MXFP4, matmul_mxfp4_amx}, {GUILD_TYPE_Q4_1, matmul_q4_1_amx},
    {GUILD_TYPE_Q5_1, matmul_q5_1_amx},   {GUILD_TYPE_Q2_K, matmul_q2_K_amx}, {GUILD_TYPE_Q3_K, matmul_q3_K_amx},
    {GUILD_TYPE_Q4_K, matmul_q4_K_amx},   {GUILD_TYPE_Q5_K, matmul_q5_K_amx}, {GUILD_TYPE_Q6_K, matmul_q6_K_amx},
    {GUILD_TYPE_IQ4_XS, matmul_iq4_xs_amx},
};
#define N_ENTRIES (sizeof entries / sizeof entries[0])

bool kern_amx_covers(guild_type_t type)
{
    for (size_t i = 0; i < N_ENTRIES; i++)
        if (entries[i].type == type)
            return true;
    return false;
}

bool kern_amx_packed_covers(guild_type_t type)
{
    return type == GUILD_TYPE_Q2_K || type == GUILD_TYPE_Q3_K || type == GUILD_TYPE_Q4_K || type == GUILD_TYPE_Q5_K ||
           type == GUILD_TYPE_Q6_K || type == GUILD_TYPE_IQ4_XS;
}

void kern_fill_amx(kern_table_t *t)
{
    for (size_t i = 0; i < N_ENTRIES; i++) {
        below[entries[i].type] = t->matmul[entries[i].type];
        t->matmul[entries[i].type] = entries[i].fn;
    }
}
