/* core/kern/table.h — internal: the kernel table of one ISA level, and the per-ISA functions that fill it.
 *
 * Each level's table starts as a copy of the level below and each ISA file overwrites the entries it
 * implements, so a type without a kernel at some level runs the best one below it; an entry still NULL means
 * the scalar reference. dispatch.c is the only user.
 */
#ifndef GUILD_KERN_TABLE_H
#define GUILD_KERN_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/quant/types.h"

/* See kern_matmul (core/kern/kern.h) for the contract. */
typedef void (*kern_matmul_fn)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                               const void *act, size_t act_stride, float *out, size_t ldo);
/* See kern_quantize. */
typedef void (*kern_quantize_fn)(const float *x, void *dst, int64_t n);

typedef struct kern_table {
    kern_matmul_fn matmul[GUILD_TYPE_COUNT];     /* by weight type */
    kern_quantize_fn quantize[GUILD_TYPE_COUNT]; /* by activation type */
    /* by weight type, on packed rows (core/kern/pack.h), for 1 .. KERN_PACK_MAX_TOKENS tokens; NULL: unpack and
     * run matmul[] */
    kern_matmul_fn matmul_packed[GUILD_TYPE_COUNT];
    /* matmul_packed[type] takes any token count (it passes over the rows once per KERN_PACK_MAX_TOKENS tokens):
     * below the amx level it then runs where the others unpack for the plain kernel */
    bool packed_any_tokens[GUILD_TYPE_COUNT];
} kern_table_t;

/* The references (scalar.c): what a NULL table entry means. */
void kern_matmul_scalar(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                        size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);
void kern_quantize_scalar(guild_type_t act_type, const float *x, void *dst, int64_t n);

/* A kernel that a level passes over on this CPU for a faster variant of it (a feature beyond the level's: VBMI,
 * GFNI), which CPUs without that feature run. Tests check these against the reference too. */
typedef struct kern_variant {
    const char *name;  /* what it is, for messages */
    guild_type_t type; /* weight type */
    bool packed;       /* on packed rows (core/kern/pack.h: matmul_packed's contract), else matmul's */
    kern_matmul_fn fn;
} kern_variant_t;

/* The avx512-vnni level's passed-over kernels on this CPU (avx512_vnni.c), at most max of them; returns how
 * many. None where the CPU lacks the level. */
int kern_avx512_vnni_variants(kern_variant_t *out, int max);

/* The x86 fillers exist on every architecture and do nothing where the ISA cannot exist. */
void kern_fill_avx2(kern_table_t *t);
void kern_fill_avx512(kern_table_t *t);
void kern_fill_avx512_vnni(kern_table_t *t);
void kern_fill_amx(kern_table_t *t);

#endif
