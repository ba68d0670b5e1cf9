/* cuda_expert_unpack, cuda_expert_ids_map: what streaming the CPU side's own expert copies needs on the device.
 *
 * unpack: the copies may be packed (core/kern/pack.h: 16 rows re-laid per 256-element block column), the kernels
 *         read GGUF's plain rows. One block per 16-row group of one expert's matrix, in place: the group is read
 *         whole into shared memory, then every plain 4-byte word is gathered from its packed place and stored.
 *         The places are kern_pack_packed_offset's (the arithmetic the host's kern_unpack inverts): computed per
 *         byte, or read from a gather table that the host computed once with it for the rows' size
 *         (cuda_expert_unpack_table, the same for every group, so it stays in the caches: the per-byte 64-bit
 *         divisions made the unpacking compete with the products for the SMs). With the table, a plain word that
 *         is one packed word (most of the quants) is one load, the others four byte loads, from shared memory
 *         laid out so that a warp's loads fall in distinct banks (UNPACK_SKEW). A byte permutation: the plain
 *         bytes come back exactly.
 * ids:    a layer's experts are split among the device's parts (resident experts, staged chunks) and the CPU
 *         side by a rank table (cuda_rank_table_t: rank[e] >= 0 the expert's place among the device's experts,
 *         < 0 the CPU side's); each part computes ranks [lo, hi) with part-local ids, the CPU side its own
 *         experts, every other pair a skip slot (moe_exec.h).
 * tiles:  a layer routed once over its device ranks hands each part its range of the tile table.
 */
#include <stdlib.h>

#include "gpu-worker/dense/cuda/cuda_common.cuh"

#define UNPACK_THREADS 256

static __global__ void __launch_bounds__(UNPACK_THREADS)
    expert_unpack_kernel(kern_pack_layout_t l, char *__restrict__ base, size_t expert_stride, size_t row_bytes)
{
    extern __shared__ int4 grp4[];
    const unsigned char *grp = (const unsigned char *)grp4;
    const size_t gbytes = KERN_PACK_GROUP_ROWS * row_bytes; /* a multiple of 16 */
    char *g = base + (size_t)blockIdx.y * expert_stride + (size_t)blockIdx.x * gbytes;
    const int4 *src = (const int4 *)g;
    for (size_t i = threadIdx.x; i < gbytes / 16; i += blockDim.x)
        grp4[i] = src[i];
    __syncthreads();
    uint32_t *dst = (uint32_t *)g;
    for (size_t w = threadIdx.x; w < gbytes / 4; w += blockDim.x) {
        uint32_t v = 0;
#pragma unroll
        for (int k = 0; k < 4; k++)
            v |= (uint32_t)grp[kern_pack_packed_offset(&l, row_bytes, 4 * w + (size_t)k)] << (8 * k);
        dst[w] = v;
    }
}

/* The gather table kernel's shared memory: packed word p of the group at UNPACK_SKEW(p), one spare word after
 * every 32. A 4-byte chunk region puts a row's consecutive chunks 16 words apart (kern_pack_layout.h), so the 32
 * lanes of a warp gathering one row's consecutive plain words read 2 banks 16 times over; skewed, 32 banks once. */
#define UNPACK_SKEW(p) ((p) + ((p) >> 5))
/* a word table entry: the plain word's packed word index, or this flag: gather its bytes (the byte table) */
#define UNPACK_BYTES 0x80000000u

static __device__ __forceinline__ uint32_t unpack_byte(const uint32_t *grp, uint32_t o)
{
    return grp[UNPACK_SKEW(o >> 2)] >> (8 * (o & 3)) & 0xffu;
}

/* The same permutation from the gather tables: words[w] the packed word that plain word w is (most words of the
 * K-quants' quants and scales), else tab[w] the packed places of its four bytes. */
static __global__ void __launch_bounds__(UNPACK_THREADS)
    expert_unpack_table_kernel(const uint4 *__restrict__ tab, const uint32_t *__restrict__ words,
                               char *__restrict__ base, size_t expert_stride, uint32_t gbytes)
{
    extern __shared__ uint32_t grpw[];
    char *g = base + (size_t)blockIdx.y * expert_stride + (size_t)blockIdx.x * gbytes;
    const uint4 *src = (const uint4 *)g;
    for (uint32_t i = threadIdx.x; i < gbytes / 16; i += blockDim.x) {
        const uint4 v = src[i];
        uint32_t *d = grpw + UNPACK_SKEW(4 * i); /* words 4i..4i+3 lie in one run of 32 */
        d[0] = v.x;
        d[1] = v.y;
        d[2] = v.z;
        d[3] = v.w;
    }
    __syncthreads();
    uint32_t *dst = (uint32_t *)g;
    for (uint32_t w = threadIdx.x; w < gbytes / 4; w += blockDim.x) {
        const uint32_t q = __ldg(words + w);
        uint32_t v;
        if (!(q & UNPACK_BYTES)) {
            v = grpw[UNPACK_SKEW(q)];
        } else {
            const uint4 o = __ldg(tab + w);
            v = unpack_byte(grpw, o.x) | unpack_byte(grpw, o.y) << 8 | unpack_byte(grpw, o.z) << 16 |
                unpack_byte(grpw, o.w) << 24;
        }
        dst[w] = v;
    }
}

extern "C" int cuda_expert_unpack_table(const kern_pack_layout_t *layout, size_t row_bytes, uint32_t **out,
                                        size_t *bytes, guild_err_t *err)
{
    *out = NULL;
    if (!layout || !row_bytes || row_bytes % layout->block_bytes || KERN_PACK_GROUP_ROWS * row_bytes > UINT32_MAX)
        return guild_err_set(err, "cuda: expert unpack table: rows of %zu bytes", row_bytes);
    /* n byte places, then n / 4 word entries (UNPACK_BYTES where a plain word is not one packed word) */
    const size_t n = KERN_PACK_GROUP_ROWS * row_bytes, all = n + n / 4;
    uint32_t *h = (uint32_t *)malloc(all * sizeof *h);
    if (!h)
        return guild_err_set(err, "cuda: expert unpack table: out of memory");
    for (size_t i = 0; i < n; i++)
        h[i] = (uint32_t)kern_pack_packed_offset(layout, row_bytes, i);
    for (size_t w = 0; w < n / 4; w++) {
        const uint32_t *o = h + 4 * w;
        const bool word = o[0] % 4 == 0 && o[1] == o[0] + 1 && o[2] == o[0] + 2 && o[3] == o[0] + 3;
        h[n + w] = word ? o[0] / 4 : UNPACK_BYTES;
    }
    void *d = NULL;
    int rc = 0;
    if (cudaMalloc(&d, all * sizeof *h) != cudaSuccess ||
        cudaMemcpy(d, h, all * sizeof *h, cudaMemcpyHostToDevice) != cudaSuccess) {
        (void)cudaGetLastError();
        if (d)
            cudaFree(d);
        rc = guild_err_set(err, "cuda: expert unpack table: no device memory for %zu bytes", all * sizeof *h);
    } else {
        *out = (uint32_t *)d;
        if (bytes)
            *bytes += all * sizeof *h;
    }
    free(h);
    return rc;
}

extern "C" int cuda_expert_unpack(const kern_pack_layout_t *layout, const uint32_t *table, void *base,
                                  size_t expert_stride, int32_t n_experts, int64_t nrows, size_t row_bytes,
                                  cudaStream_t s, guild_err_t *err)
{
    if (!layout || n_experts < 0 || nrows < 0 || nrows % KERN_PACK_GROUP_ROWS || !row_bytes ||
        row_bytes % layout->block_bytes || nrows / KERN_PACK_GROUP_ROWS > 65535 * 1024 || n_experts > 65535)
        return guild_err_set(err, "cuda: expert unpack: %d experts of %lld rows of %zu bytes", n_experts,
                             (long long)nrows, row_bytes);
    if (((uintptr_t)base | expert_stride) % 16)
        return guild_err_set(err, "cuda: expert unpack: matrices must be 16-byte aligned");
    if (n_experts == 0 || nrows == 0)
        return 0;
    const size_t gbytes = KERN_PACK_GROUP_ROWS * row_bytes;
    /* the table kernel keeps the group's words skewed (UNPACK_SKEW): a spare word after every 32 */
    const size_t smem = table ? (gbytes / 4 + gbytes / 128 + 1) * 4 : gbytes;
    int dev = 0, max_smem = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return cuda_launch_check("expert unpack", err);
    if (smem > (size_t)max_smem)
        return guild_err_set(err, "cuda: expert unpack: a group of 16 rows of %zu bytes is over the %d bytes of "
                             "shared memory a block may have", row_bytes, max_smem);
    if (smem > 48 * 1024 &&
        (table ? cudaFuncSetAttribute(expert_unpack_table_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem)
               : cudaFuncSetAttribute(expert_unpack_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) !=
            cudaSuccess)
        return cuda_launch_check("expert unpack", err);
    const dim3 grid((unsigned)(nrows / KERN_PACK_GROUP_ROWS), (unsigned)n_experts);
    if (table)
        expert_unpack_table_kernel<<<grid, UNPACK_THREADS, smem, s>>>((const uint4 *)table, table + gbytes,
                                                                       (char *)base, expert_stride,
                                                                       (uint32_t)gbytes);
    else
        expert_unpack_kernel<<<grid, UNPACK_THREADS, smem, s>>>(*layout, (char *)base, expert_stride, row_bytes);
    return cuda_launch_check("expert unpack", err);
}

static __global__ void expert_ids_map_kernel(const int32_t *__restrict__ ids, int32_t n, cuda_rank_table_t t,
                                             int32_t n_expert, int32_t lo, int32_t hi, int32_t *__restrict__ out)
{
    const int32_t p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n)
        return;
    const int32_t e = ids[p];
    int32_t v = -1;
    if (e >= 0 && e < n_expert) {
        const int32_t r = t.rank[e];
        if (lo < 0)
            v = r < 0 ? e : -1; /* the CPU side keeps its experts' ids */
        else if (r >= lo && r < hi)
            v = r - lo;
    }
    out[p] = v;
}

extern "C" int cuda_expert_ids_map(const int32_t *ids, int32_t n_pairs, const cuda_rank_table_t *table,
                                   int32_t n_expert, int32_t lo, int32_t hi, int32_t *out, cudaStream_t s,
                                   guild_err_t *err)
{
    if (n_pairs < 0 || n_expert < 1 || n_expert > CUDA_RANK_TABLE_MAX || (lo >= 0 && hi < lo))
        return guild_err_set(err, "cuda: expert ids map: %d pairs, %d experts, ranks [%d, %d)", n_pairs, n_expert,
                             lo, hi);
    if (n_pairs == 0)
        return 0;
    expert_ids_map_kernel<<<(unsigned)((n_pairs + 255) / 256), 256, 0, s>>>(ids, n_pairs, *table, n_expert,
                                                                            lo < 0 ? -1 : lo, hi, out);
    return cuda_launch_check("expert ids map", err);
}

static __global__ void expert_tiles_range_kernel(const int4 *__restrict__ tiles, const int32_t *__restrict__ n_tiles,
                                                 int32_t lo, int32_t hi, int4 *__restrict__ out,
                                                 int32_t *__restrict__ n_out)
{
    __shared__ int cnt;
    if (threadIdx.x == 0)
        cnt = 0;
    __syncthreads();
    const int n = *n_tiles;
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
        int4 v = tiles[t];
        if (v.x >= lo && v.x < hi) {
            v.x -= lo;
            out[atomicAdd(&cnt, 1)] = v;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0)
        *n_out = cnt;
}

extern "C" int cuda_expert_tiles_range(const int32_t *tiles, const int32_t *n_tiles, int32_t lo, int32_t hi,
                                       int32_t *out, int32_t *n_out, cudaStream_t s, guild_err_t *err)
{
    if (lo < 0 || hi < lo || ((uintptr_t)tiles | (uintptr_t)out) % 16)
        return guild_err_set(err, "cuda: expert tiles range: experts [%d, %d), tables 16-byte aligned", lo, hi);
    expert_tiles_range_kernel<<<1, 256, 0, s>>>((const int4 *)tiles, n_tiles, lo, hi, (int4 *)out, n_out);
    return cuda_launch_check("expert tiles range", err);
}

static __global__ void expert_ids_keep_kernel(const int32_t *__restrict__ ids, const int32_t *__restrict__ lids,
                                              int32_t n, int32_t *__restrict__ out)
{
    const int32_t p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p < n)
        out[p] = lids[p] >= 0 ? ids[p] : -1;
}

extern "C" int cuda_expert_ids_keep(const int32_t *ids, const int32_t *lids, int32_t n_pairs, int32_t *out,
                                    cudaStream_t s, guild_err_t *err)
{
    if (n_pairs < 0)
        return guild_err_set(err, "cuda: expert ids keep: %d pairs", n_pairs);
    if (n_pairs == 0)
        return 0;
    expert_ids_keep_kernel<<<(unsigned)((n_pairs + 255) / 256), 256, 0, s>>>(ids, lids, n_pairs, out);
    return cuda_launch_check("expert ids keep", err);
}
