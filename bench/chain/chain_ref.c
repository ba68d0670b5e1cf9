/* bench/chain/chain_ref.c — the scalar reference of the chain's step (chain_kernels.h): the same words as every
 * variant of the kernels, from the weight formula, without the device. */
#include "bench/chain/chain_kernels.h"

#include <string.h>

void chain_reference(const chain_args_t *a, uint32_t *out, uint32_t *scratch)
{
    uint32_t *in = scratch;
    memset(in, 0, (size_t)a->act * sizeof *in);
    const size_t n16 = a->words / 4, G = (size_t)a->blocks;
    const int64_t n = (int64_t)a->layers * a->phases;
    for (int64_t g = 0; g < n; g++) {
        uint32_t sin = 0;
        for (int32_t i = 0; i < a->act; i++)
            sin += in[i];
        const uint64_t base = (uint64_t)g * a->words;
        for (size_t b = 0; b < G; b++) {
            uint32_t acc = 0;
            for (uint64_t j = base + 4 * (n16 * b / G); j < base + 4 * (n16 * (b + 1) / G); j++)
                acc += chain_word(j);
            for (size_t i = b; i < (size_t)a->act; i += G)
                out[i] = acc + sin + (uint32_t)i;
        }
        memcpy(in, out, (size_t)a->act * sizeof *in);
    }
}
