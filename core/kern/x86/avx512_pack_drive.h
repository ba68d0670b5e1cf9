/* core/kern/x86/avx512_pack_drive.h — the driver shared by the packed kernels (avx512_pack_*.h; the layout in
 * core/kern/pack.h): each token's activations prepared once per call, the groups of 16 rows, tiles of up to
 * PKD_TILE tokens, and the software prefetch of the weight stream. Included by avx512_vnni.c before them.
 *
 * A kernel is two functions: a prepare function (one token's q8_K block -> the per-block data its record
 * function reads) and a record function (one record: the 16 rows' block of one column,
 * for tt tokens, rows in lanes, sums into sumf[t]). pkd_matmul takes both as constants and everything here is
 * always_inline, so each kernel compiles to its own straight code, one copy per tile size.
 *
 * Prefetch, into L2, PKD_AHEAD records ahead of the record being read. The record function spreads a record's
 * prefetches over its steps (pkd_prefetch, one slice per step): issued all at once at the record's start, a
 * record's 21-53 prefetches took the core's miss buffers in a burst, with the record's own loads queued behind
 * them, and the kernel read DRAM measurably slower than spread. Without software prefetch the packed kernels
 * read DRAM slower than the plain ones: their loads come too fast for the hardware prefetchers alone. (The
 * measurements: bench/results/code-comment-measurements.md.) */
#ifndef GUILD_KERN_X86_AVX512_PACK_DRIVE_H
#define GUILD_KERN_X86_AVX512_PACK_DRIVE_H

#include <stdint.h>
#include <string.h>

#include "core/kern/pack.h"
#include "core/quant/blocks.h"

#define PKD_TILE 4 /* tokens per pass over a group: four tokens' accumulators fill the register file */
/* records of prefetch distance: the fastest from DRAM on one core for q4_K and iq4_xs (one record is too late,
 * three or more no better) */
#define PKD_AHEAD 2

/* One token's block a -> aux (aux_bytes of the kernel, 8-byte aligned). */
typedef void (*pkd_prep_fn)(const quant_block_q8_K *a, void *aux);
/* Record o (block column b) for tt tokens: at[t] token t's activation row, aux[t] its prepared data of block b;
 * sumf[t] += the record's sums, rows in lanes. pf: the record PKD_AHEAD ahead (0: none), prefetched by
 * pkd_prefetch over the record's steps. */
typedef void (*pkd_record_fn)(const char *o, int tt, const quant_block_q8_K *const *at, int64_t b,
                              const void *const *aux, __m512 *sumf, uintptr_t pf);

/* acc + vpdpbusd(w, the int32 at p broadcast) with the broadcast embedded in the instruction ({1to16}): one
 * fused uop where GCC's vpbroadcastd + vpdpbusd for the intrinsics are two (it has no broadcast form of
 * vpdpbusd). Fewer uops in flight per weight byte let more loads run ahead, which one core from DRAM shows. */
static inline __attribute__((always_inline)) __m512i pkd_dpbusd_bcst(__m512i acc, __m512i w, const void *p)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
}

/* Sums of a block's activation quants over runs of `width` elements: out[s] = qs[width s] + .. + qs[width s +
 * width - 1], s < QUANT_QK_K / width. From qs, as the references take them (they never read bsums). */
static inline __attribute__((always_inline)) void pkd_qs_sums(const quant_block_q8_K *a, int width, int32_t *out)
{
    for (int s = 0; s < QUANT_QK_K / width; s++) {
        int32_t sum = 0;
        for (int i = 0; i < width; i++)
            sum += a->qs[width * s + i];
        out[s] = sum;
    }
}

/* Step `step` of `steps` of a record's prefetch (all constants after inlining): lines [lines * step / steps,
 * lines * (step + 1) / steps) from pf; none when pf is 0. Addresses are integers (kq_pf_t says why). */
static inline __attribute__((always_inline)) void pkd_prefetch(uintptr_t pf, int lines, int step, int steps)
{
    if (!pf)
        return;
#pragma GCC unroll 16
    for (int k = lines * step / steps; k < lines * (step + 1) / steps; k++)
        _mm_prefetch((const char *)(pf + 64 * (uintptr_t)k), _MM_HINT_T1);
}

/* The records of one group for a tile of tt tokens (a constant after inlining); prefetching when end (the end of
 * the call's rows) is set, never past it. aux: token 0's prepared data, tokens aux_tok bytes apart. */
static inline __attribute__((always_inline)) void pkd_group(const char *grp, int64_t nb, int tt, size_t record,
                                                            const quant_block_q8_K *const *at, const char *aux,
                                                            size_t aux_bytes, size_t aux_tok, uintptr_t end,
                                                            pkd_record_fn fn, float *out, size_t ldo)
{
    __m512 sumf[PKD_TILE];
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        sumf[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *o = grp + (size_t)b * record;
        uintptr_t pf = end ? (uintptr_t)o + PKD_AHEAD * record : 0;
        if (pf && pf + record > end) { /* the call's last records: the rest of its rows, then nothing */
            for (uintptr_t p = pf; p < end; p += 64)
                _mm_prefetch((const char *)p, _MM_HINT_T1);
            pf = 0;
        }
        const void *ab[PKD_TILE];
#pragma GCC unroll 4
        for (int t = 0; t < tt; t++)
            ab[t] = aux + (size_t)t * aux_tok + (size_t)b * aux_bytes;
        fn(o, tt, at, b, ab, sumf, pf);
    }
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        _mm512_storeu_ps(out + (size_t)t * ldo, sumf[t]);
}

/* kern_matmul_packed's contract (1 .. KERN_PACK_MAX_TOKENS tokens) for records of `record` bytes. */
static inline __attribute__((always_inline)) void pkd_matmul(int64_t n, int64_t nrows, int64_t ntok, const void *w,
                                                             size_t w_stride, const void *act, size_t act_stride,
                                                             float *out, size_t ldo, size_t record, size_t aux_bytes,
                                                             pkd_prep_fn prep, pkd_record_fn fn)
{
    const int64_t nb = n / QUANT_QK_K;
    const quant_block_q8_K *at[KERN_PACK_MAX_TOKENS];
    /* [token][block]: prep's data; one block at least (n = 0 is allowed and gives zeros; an empty VLA is not) */
    const size_t aux_tok = (size_t)(nb > 0 ? nb : 1) * aux_bytes;
    uint64_t aux[(size_t)ntok * aux_tok / sizeof(uint64_t)];
    for (int64_t t = 0; t < ntok; t++) {
        at[t] = (const quant_block_q8_K *)((const char *)act + (size_t)t * act_stride);
        for (int64_t b = 0; b < nb; b++)
            prep(&at[t][b], (char *)aux + (size_t)t * aux_tok + (size_t)b * aux_bytes);
    }
    const uintptr_t end = (uintptr_t)w + (size_t)nrows * w_stride;
    /* a call starts a new stream (a pipeline task, on whichever core took it): its first records now */
    for (uintptr_t p = (uintptr_t)w & ~(uintptr_t)63; p < (uintptr_t)w + PKD_AHEAD * record && p < end; p += 64)
        _mm_prefetch((const char *)p, _MM_HINT_T1);
    for (int64_t r0 = 0; r0 < nrows; r0 += KERN_PACK_ROWS) {
        const char *grp = (const char *)w + (size_t)r0 * w_stride;
        /* the first tile streams the group from memory (and prefetches), the others find it in L1/L2 */
        for (int64_t t0 = 0; t0 < ntok; t0 += PKD_TILE) {
            const int tt = (int)(ntok - t0 < PKD_TILE ? ntok - t0 : PKD_TILE);
            const uintptr_t pf_end = t0 == 0 ? end : 0;
            const char *ax = (const char *)aux + (size_t)t0 * aux_tok;
            float *o = out + (size_t)t0 * ldo + (size_t)r0;
            switch (tt) {
            case 1: pkd_group(grp, nb, 1, record, at + t0, ax, aux_bytes, aux_tok, pf_end, fn, o, ldo); break;
            case 2: pkd_group(grp, nb, 2, record, at + t0, ax, aux_bytes, aux_tok, pf_end, fn, o, ldo); break;
            case 3: pkd_group(grp, nb, 3, record, at + t0, ax, aux_bytes, aux_tok, pf_end, fn, o, ldo); break;
            default: pkd_group(grp, nb, 4, record, at + t0, ax, aux_bytes, aux_tok, pf_end, fn, o, ldo); break;
            }
        }
    }
}

#endif
