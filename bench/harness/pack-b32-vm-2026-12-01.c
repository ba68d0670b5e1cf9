/* Plain against packed kernels of the 32-element types on gpt-oss's expert rows (2880 wide), one thread, timed
 * by the thread's CPU time (a preempted thread does not count: the VM was shared by several engineers' builds).
 * Two modes: "l2": one 2880 x 128 matrix per type (plain and packed copies), rounds of K calls of each variant
 * (plain, packed, packed, plain, each phase after an untimed call that brings its copy back into L2); "dram":
 * a 512 MB bank of such matrices walked in order (each call a new matrix, as the expert pipeline's tasks),
 * plain and packed banks alternating per round. Medians over the rounds of GB/s of weights and of the per-round
 * ratio packed/plain; the outputs of the two layouts are compared bit for bit.
 * Build (against main 7bafecd): gcc -O2 -std=gnu11 -I. -Ibuild bench/harness/pack-b32-vm-2026-12-01.c
 *   build/core/libguild-core.a -lm -lpthread -o /tmp/pb32
 * usage: pb32 l2|dram NTOK ROUNDS TYPE... (NTOK <= 64; above 16 kern_matmul_packed unpacks for the plain kernel) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/quant/blocks.h"

static double cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double med(double *v, int n)
{
    qsort(v, n, sizeof *v, cmpd);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    const int dram = !strcmp(argv[1], "dram"), ntok = atoi(argv[2]), R = atoi(argv[3]);
    const int64_t N = 2880, ROWS = 128;
    const size_t as = N / 32 * sizeof(quant_block_q8_0);
    float *x = malloc(N * sizeof(float) * 64);
    for (int i = 0; i < N * 64; i++)
        x[i] = (rand() % 2000 - 1000) / 1000.0f;
    char *a = aligned_alloc(64, 64 * as);
    for (int t = 0; t < 64; t++)
        kern_quantize(GUILD_TYPE_Q8_0, x + t * N, a + t * as, N);
    float *o1 = malloc(64 * ROWS * 4), *o2 = malloc(64 * ROWS * 4);
    for (int ai = 4; ai < argc; ai++) {
        const guild_type_t TY = !strcmp(argv[ai], "q8_0")     ? GUILD_TYPE_Q8_0
                                : !strcmp(argv[ai], "q4_0")   ? GUILD_TYPE_Q4_0
                                : !strcmp(argv[ai], "iq4_nl") ? GUILD_TYPE_IQ4_NL
                                                              : GUILD_TYPE_MXFP4;
        const size_t bb = quant_type_info(TY)->block_bytes, rb = N / 32 * bb, matb = ROWS * rb;
        const size_t nmat = dram ? (512u << 20) / matb : 1, bank = nmat * matb;
        unsigned char *w = aligned_alloc(64, (bank + 63) / 64 * 64), *p = aligned_alloc(64, (bank + 63) / 64 * 64);
        for (size_t i = 0; i < bank; i++)
            w[i] = rand();
        for (size_t i = 0; i < bank / bb; i++) {
            if (TY == GUILD_TYPE_MXFP4) {
                w[i * bb] = 118 + rand() % 20;
            } else {
                const unsigned short h = 0x2c00;
                memcpy(w + i * bb, &h, 2);
            }
        }
        guild_err_t err;
        for (size_t m = 0; m < nmat; m++)
            if (kern_pack(TY, N, ROWS, w + m * matb, rb, p + m * matb, &err)) {
                printf("%s\n", err.msg);
                return 1;
            }
        kern_matmul(TY, N, ROWS, ntok, w, rb, a, as, o1, ROWS);
        kern_matmul_packed(TY, N, ROWS, ntok, p, rb, a, as, o2, ROWS);
        const int same = !memcmp(o1, o2, (size_t)ntok * ROWS * 4);
        double gp[R], gk[R], rt[R];
        const int K = dram ? (int)nmat : 6;
        for (int r = 0; r < R; r++) {
            double sp = 0, sk = 0, t = 0;
            for (int ph = 0; ph < 4; ph++) {
                const int pk = ph == 1 || ph == 2;
                for (int k = dram ? 0 : -1; k < K; k++) {
                    if (k == 0)
                        t = cpu();
                    const size_t off = dram ? (size_t)k * matb : 0;
                    if (pk)
                        kern_matmul_packed(TY, N, ROWS, ntok, p + off, rb, a, as, o2, ROWS);
                    else
                        kern_matmul(TY, N, ROWS, ntok, w + off, rb, a, as, o1, ROWS);
                }
                t = cpu() - t;
                if (pk)
                    sk += t;
                else
                    sp += t;
            }
            gp[r] = 2.0 * K * matb / sp / 1e9;
            gk[r] = 2.0 * K * matb / sk / 1e9;
            rt[r] = gk[r] / gp[r];
        }
        printf("%-6s %s ntok=%d native=%d bits %s  plain %.1f  packed %.1f GB/s (medians of %d rounds)  "
               "packed/plain %.2f\n",
               argv[ai], dram ? "dram" : "l2", ntok, kern_pack_native(TY), same ? "same" : "DIFFER", med(gp, R),
               med(gk, R), R, med(rt, R));
        free(w);
        free(p);
    }
    return 0;
}
