/* The plain-C model of the AMX-INT8 tile instructions (core/kern/x86/amx_tile.h). Portable C: it runs on any
 * CPU; only the kernels around it need AVX-512. */
#include "core/kern/x86/amx_tile.h"

#include <stdbool.h>
#include <string.h>

#include "core/util/err.h"

#define AMX_TILES 8
#define AMX_MAX_ROWS 16
#define AMX_MAX_COLSB 64

typedef struct amx_state {
    bool configured;
    uint8_t rows[AMX_TILES];
    uint16_t colsb[AMX_TILES];
    uint8_t data[AMX_TILES][AMX_MAX_ROWS][AMX_MAX_COLSB]; /* [tile][row][byte] */
} amx_state_t;

static _Thread_local amx_state_t tmm;

void amx_model_loadconfig(const amx_tilecfg_t *cfg)
{
    GUILD_ASSERT(cfg->palette == 1);
    GUILD_ASSERT(cfg->start_row == 0);
    for (int i = 0; i < 14; i++)
        GUILD_ASSERT(cfg->reserved[i] == 0);
    for (int t = 0; t < 16; t++) {
        if (t >= AMX_TILES) {
            GUILD_ASSERT(cfg->rows[t] == 0 && cfg->colsb[t] == 0);
            continue;
        }
        GUILD_ASSERT(cfg->rows[t] <= AMX_MAX_ROWS && cfg->colsb[t] <= AMX_MAX_COLSB);
        GUILD_ASSERT((cfg->rows[t] == 0) == (cfg->colsb[t] == 0));
        tmm.rows[t] = cfg->rows[t];
        tmm.colsb[t] = cfg->colsb[t];
    }
    memset(tmm.data, 0, sizeof tmm.data);
    tmm.configured = true;
}

void amx_model_release(void)
{
    memset(&tmm, 0, sizeof tmm);
}

/* #UD unless the tiles are configured and tile t is one of the configured ones */
static void check_tile(int t)
{
    GUILD_ASSERT(tmm.configured);
    GUILD_ASSERT(t >= 0 && t < AMX_TILES);
    GUILD_ASSERT(tmm.rows[t] > 0);
}

void amx_model_zero(int t)
{
    check_tile(t);
    memset(tmm.data[t], 0, sizeof tmm.data[t]);
}

void amx_model_load(int t, const void *base, int64_t stride)
{
    check_tile(t);
    memset(tmm.data[t], 0, sizeof tmm.data[t]);
    for (int r = 0; r < tmm.rows[t]; r++)
        memcpy(tmm.data[t][r], (const char *)base + r * stride, tmm.colsb[t]);
}

void amx_model_store(int t, void *base, int64_t stride)
{
    check_tile(t);
    for (int r = 0; r < tmm.rows[t]; r++)
        memcpy((char *)base + r * stride, tmm.data[t][r], tmm.colsb[t]);
}

static int32_t dword_of(const uint8_t *row, int n)
{
    uint32_t v;
    memcpy(&v, row + 4 * n, 4);
    return (int32_t)v;
}

void amx_model_dpbssd(int c, int a, int b)
{
    check_tile(c);
    check_tile(a);
    check_tile(b);
    GUILD_ASSERT(c != a && c != b && a != b);
    GUILD_ASSERT(tmm.colsb[a] % 4 == 0 && tmm.colsb[c] % 4 == 0);
    GUILD_ASSERT(tmm.rows[c] == tmm.rows[a]);
    GUILD_ASSERT(tmm.rows[b] == tmm.colsb[a] / 4);
    GUILD_ASSERT(tmm.colsb[c] == tmm.colsb[b]);
    const int rows = tmm.rows[c], nk = tmm.colsb[a] / 4, nn = tmm.colsb[c] / 4;
    uint8_t res[AMX_MAX_ROWS][AMX_MAX_COLSB] = {{0}};
    for (int m = 0; m < rows; m++)
        for (int n = 0; n < nn; n++) {
            /* unsigned arithmetic: the hardware wraps, C's signed overflow would be undefined */
            uint32_t acc = (uint32_t)dword_of(tmm.data[c][m], n);
            for (int k = 0; k < nk; k++)
                for (int i = 0; i < 4; i++)
                    acc += (uint32_t)((int32_t)(int8_t)tmm.data[a][m][4 * k + i] *
                                      (int32_t)(int8_t)tmm.data[b][k][4 * n + i]);
            memcpy(res[m] + 4 * n, &acc, 4);
        }
    /* the rest of the destination (columns past colsb, rows past rows) is zeroed, as the SDM's pseudo-code
     * does */
    memcpy(tmm.data[c], res, sizeof res);
}
