/* The one dispatch point of the CPU kernels: a table per ISA level, built once, and the active level. */
#include <pthread.h>
#include <stdlib.h>
#include <strings.h>

#include "core/kern/cpu.h"
#include "core/kern/amx.h"
#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/quant/blocks.h"
#include "core/kern/table.h"
#include "core/util/log.h"

static const char *const level_names[KERN_LEVEL_COUNT] = {"scalar", "avx2", "avx512", "avx512-vnni", "amx"};

static kern_table_t tables[KERN_LEVEL_COUNT];
static kern_level_t best_level;
static int active_level = -1; /* atomic; -1 until the first use or kern_set_level */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static bool cpu_has_level(const kern_cpu_t *c, kern_level_t level)
{
    switch (level) {
    case KERN_LEVEL_SCALAR:
        return true;
    case KERN_LEVEL_AVX2:
        return c->avx2 && c->fma && c->f16c;
    case KERN_LEVEL_AVX512:
        return cpu_has_level(c, KERN_LEVEL_AVX2) && c->bmi2 && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
    case KERN_LEVEL_AVX512_VNNI:
        return cpu_has_level(c, KERN_LEVEL_AVX512) && c->avx512vnni;
    case KERN_LEVEL_AMX:
        return cpu_has_level(c, KERN_LEVEL_AVX512_VNNI) && c->amx_tile && c->amx_int8;
    default:
        return false;
    }
}

static void build_tables(void)
{
    static void (*const fill[KERN_LEVEL_COUNT])(kern_table_t *) = {
        [KERN_LEVEL_AVX2] = kern_fill_avx2,
        [KERN_LEVEL_AVX512] = kern_fill_avx512,
        [KERN_LEVEL_AVX512_VNNI] = kern_fill_avx512_vnni,
        [KERN_LEVEL_AMX] = kern_fill_amx,
    };
    const kern_cpu_t *cpu = kern_cpu();
    best_level = KERN_LEVEL_SCALAR;
    for (int l = 1; l < KERN_LEVEL_COUNT; l++) {
        tables[l] = tables[l - 1];
        /* a level the CPU lacks is never filled: its entries could not run here */
        if (cpu_has_level(cpu, (kern_level_t)l)) {
            fill[l](&tables[l]);
            best_level = (kern_level_t)l;
        }
    }
}

static void ensure_tables(void)
{
    pthread_once(&tables_once, build_tables);
}

const char *kern_level_name(kern_level_t level)
{
    return (unsigned)level < KERN_LEVEL_COUNT ? level_names[level] : "?";
}

int kern_level_from_name(const char *name)
{
    for (int l = 0; l < KERN_LEVEL_COUNT; l++)
        if (!strcasecmp(name, level_names[l]))
            return l;
    return -1;
}

bool kern_level_supported(kern_level_t level)
{
    return cpu_has_level(kern_cpu(), level);
}

kern_level_t kern_level_best(void)
{
    ensure_tables();
    return best_level;
}

kern_level_t kern_level(void)
{
    int l = __atomic_load_n(&active_level, __ATOMIC_ACQUIRE);
    if (l >= 0)
        return (kern_level_t)l;
    ensure_tables();
    int expected = -1;
    if (__atomic_compare_exchange_n(&active_level, &expected, (int)best_level, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        char desc[256];
        kern_cpu_describe(kern_cpu(), desc, sizeof desc);
        guild_log(GUILD_LOG_DEBUG, "cpu kernels: %s (%s: %s)", level_names[best_level], kern_cpu()->model, desc);
        return best_level;
    }
    return (kern_level_t)expected;
}

int kern_set_level(kern_level_t level, guild_err_t *err)
{
    if ((unsigned)level >= KERN_LEVEL_COUNT)
        return guild_err_set(err, "kernel level %d does not exist", (int)level);
    if (!kern_level_supported(level))
        return guild_err_set(err, "kernel level %s: this CPU (%s) does not support it", level_names[level],
                             kern_cpu()->model);
    ensure_tables();
    __atomic_store_n(&active_level, (int)level, __ATOMIC_RELEASE);
    return 0;
}

bool kern_can_matmul(guild_type_t type)
{
    const quant_type_info_t *info = quant_type_info((uint32_t)type);
    return info && info->computable;
}

void kern_matmul_at(kern_level_t level, guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                    size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    ensure_tables();
    /* levels nest (each needs the one below), so "supported" is "not above the best" */
    GUILD_ASSERT((unsigned)level <= (unsigned)best_level);
    GUILD_ASSERT(kern_can_matmul(type));
    GUILD_ASSERT(n >= 0 && n % quant_type_info((uint32_t)type)->block_elems == 0);
    if (nrows <= 0 || ntok <= 0)
        return;
    kern_matmul_fn fn = tables[level].matmul[type];
    if (fn)
        fn(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    else
        kern_matmul_scalar(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

void kern_quantize_at(kern_level_t level, guild_type_t act_type, const float *x, void *dst, int64_t n)
{
    ensure_tables();
    GUILD_ASSERT((unsigned)level <= (unsigned)best_level);
    GUILD_ASSERT(act_type == GUILD_TYPE_F32 || act_type == GUILD_TYPE_Q8_0 || act_type == GUILD_TYPE_Q8_1 ||
                 act_type == GUILD_TYPE_Q8_K);
    GUILD_ASSERT(n >= 0 && n % quant_type_info((uint32_t)act_type)->block_elems == 0);
    kern_quantize_fn fn = tables[level].quantize[act_type];
    if (fn)
        fn(x, dst, n);
    else
        kern_quantize_scalar(act_type, x, dst, n);
}

void kern_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                 const void *act, size_t act_stride, float *out, size_t ldo)
{
    kern_matmul_at(kern_level(), type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

void kern_quantize(guild_type_t act_type, const float *x, void *dst, int64_t n)
{
    kern_quantize_at(kern_level(), act_type, x, dst, n);
}

bool kern_pack_native(guild_type_t type)
{
    ensure_tables();
    return kern_pack_has(type) && tables[kern_level()].matmul_packed[type] != NULL;
}

/* The fallback's scratch: one buffer per thread, kept between calls (a per-call allocation would cost an mmap
 * per call at these sizes) and freed when the thread exits (the key's destructor), so that the expert
 * pipeline's pool threads, which come and go with the worker's assignments, leave nothing behind. */
typedef struct unpack_buf {
    size_t bytes;
    char data[];
} unpack_buf_t;

static pthread_key_t unpack_key;
static pthread_once_t unpack_once = PTHREAD_ONCE_INIT;

static void unpack_key_make(void)
{
    int rc = pthread_key_create(&unpack_key, free);
    GUILD_ASSERT(rc == 0); /* only fails when the process has used up its keys */
}

static char *unpack_scratch(size_t bytes)
{
    pthread_once(&unpack_once, unpack_key_make);
    unpack_buf_t *b = pthread_getspecific(unpack_key);
    if (!b || b->bytes < bytes) {
        unpack_buf_t *nb = realloc(b, sizeof *nb + bytes);
        GUILD_ASSERT(nb != NULL); /* about a MB: there is no caller that could act on the failure */
        nb->bytes = bytes;
        b = nb;
        const int rc = pthread_setspecific(unpack_key, b);
        GUILD_ASSERT(rc == 0);
    }
    return b->data;
}

/* Bytes unpacked per plain-kernel call of the fallback (at least one group): the plain kernels prepare the
 * activations once per call, and the AMX ones their tiles, so calls should be as long as the caller's; 1 MB
 * holds a whole expert matrix of Qwen3-30B-A3B. */
#define UNPACK_BYTES (1u << 20)

void kern_matmul_packed_at(kern_level_t level, guild_type_t type, int64_t n, int64_t nrows, int64_t ntok,
                           const void *w, size_t w_stride, const void *act, size_t act_stride, float *out,
                           size_t ldo)
{
    ensure_tables();
    GUILD_ASSERT((unsigned)level <= (unsigned)best_level);
    GUILD_ASSERT(kern_pack_has(type));
    const quant_type_info_t *info = quant_type_info((uint32_t)type);
    GUILD_ASSERT(nrows % KERN_PACK_ROWS == 0 && n % info->block_elems == 0);
    if (nrows <= 0 || ntok <= 0)
        return;
    /* where AMX tiles take over, they read the records themselves (no unpacking), at every token count */
    if (level >= KERN_LEVEL_AMX && ntok >= KERN_AMX_MIN_TOKENS && kern_amx_packed_covers(type)) {
        kern_amx_matmul_packed(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
        return;
    }
    kern_matmul_fn fn = tables[level].matmul_packed[type];
    /* where AMX tiles take over from the VNNI kernels, they are faster than the packed ones too (types without
     * a packed AMX kernel unpack for them below) */
    const int64_t native_max = level >= KERN_LEVEL_AMX && KERN_AMX_MIN_TOKENS - 1 < KERN_PACK_MAX_TOKENS
                                   ? KERN_AMX_MIN_TOKENS - 1
                                   : KERN_PACK_MAX_TOKENS;
    if (fn && (ntok <= native_max || (level < KERN_LEVEL_AMX && tables[level].packed_any_tokens[type]))) {
        fn(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
        return;
    }
    /* Fallback (levels or types without a native kernel, and above KERN_PACK_MAX_TOKENS below the amx level):
     * the rows back in plain layout, in this thread's scratch (unpack_scratch). */
    const size_t rb = (size_t)(n / info->block_elems) * info->block_bytes;
    int64_t step = (int64_t)(UNPACK_BYTES / rb) / KERN_PACK_ROWS * KERN_PACK_ROWS;
    step = step < KERN_PACK_ROWS ? KERN_PACK_ROWS : step;
    char *scratch = unpack_scratch((size_t)step * rb);
    for (int64_t r0 = 0; r0 < nrows; r0 += step) {
        const int64_t nr = nrows - r0 < step ? nrows - r0 : step;
        kern_unpack(type, n, nr, (const char *)w + (size_t)r0 * w_stride, w_stride, scratch, rb);
        kern_matmul_at(level, type, n, nr, ntok, scratch, rb, act, act_stride, out + r0, ldo);
    }
}

void kern_matmul_packed(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                        const void *act, size_t act_stride, float *out, size_t ldo)
{
    kern_matmul_packed_at(kern_level(), type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}
