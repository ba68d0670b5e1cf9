/* core/kern/x86/amx_tile.h — internal: the AMX tile configuration (LDTILECFG's 64-byte operand, palette 1) and
 * a plain-C model of the tile instructions the AMX kernels use, so that their data layout and post-processing
 * are tested on CPUs without AMX (amx_emu.c; tests/check_amx.c).
 *
 * The model follows the Intel SDM (vol. 2, TILELOADD, TILESTORED, TILEZERO, TDPBSSD, LDTILECFG, TILERELEASE),
 * with palette 1's limits (8 tiles of at most 16 rows x 64 bytes; TMUL maxima M = 16, K = 64 bytes, N = 16
 * dwords). Where the hardware raises #UD or #GP (a tile not configured, shapes that do not match, a bad
 * configuration) the model asserts, so a kernel that would fault on AMX fails its test here. Each thread has
 * its own tile state, as on the hardware.
 */
#ifndef GUILD_KERN_X86_AMX_TILE_H
#define GUILD_KERN_X86_AMX_TILE_H

#include <stdint.h>

#include "core/quant/blocks.h" /* GUILD_STATIC_ASSERT */

/* LDTILECFG's memory operand. Tiles 8-15 and the reserved bytes must be zero in palette 1. */
typedef struct amx_tilecfg {
    uint8_t palette;      /* 1: 8 tiles of 16 x 64 bytes (0 would release the tiles) */
    uint8_t start_row;    /* restart row of an interrupted load/store: 0 */
    uint8_t reserved[14];
    uint16_t colsb[16];   /* bytes per row of tile i (<= 64); 0 with rows 0: tile unused */
    uint8_t rows[16];     /* rows of tile i (<= 16) */
} __attribute__((aligned(64))) amx_tilecfg_t;
GUILD_STATIC_ASSERT(sizeof(amx_tilecfg_t) == 64, "tile configuration size");

/* The model. Tile numbers are 0..7; strides are in bytes, any value. */
void amx_model_loadconfig(const amx_tilecfg_t *cfg); /* zeroes every tile */
void amx_model_release(void);                        /* back to the unconfigured state */
void amx_model_zero(int t);
/* rows[t] rows of colsb[t] bytes from base + r * stride; the rest of the tile becomes zero. */
void amx_model_load(int t, const void *base, int64_t stride);
/* rows[t] rows of colsb[t] bytes to base + r * stride. */
void amx_model_store(int t, void *base, int64_t stride);
/* TDPBSSD: C[m][n] += sum_{k < colsb[a]} int8 A[m][k] * int8 B[k / 4][4 n + k % 4] (int32, wrapping), for
 * m < rows[c], n < colsb[c] / 4; needs rows[c] == rows[a], rows[b] == colsb[a] / 4, colsb[c] == colsb[b], three
 * distinct tiles. */
void amx_model_dpbssd(int c, int a, int b);

#endif
