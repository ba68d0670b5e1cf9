/* gpu-worker/dense/cuda/cuda_timeline.h — the stamps a block of the decode attention or of the fused router's
 * cluster form writes where a timeline is set (cuda_set_attn_timeline, cuda_set_router_timeline in cuda_kernels.h:
 * timing programs only): each a %globaltimer reading (ns) where its phase ends. Apart from cuda_kernels.h so that
 * the programs that read the stamps (bench/prof_timeline.c) build without the CUDA headers. */
#ifndef GUILD_GPU_WORKER_CUDA_TIMELINE_H
#define GUILD_GPU_WORKER_CUDA_TIMELINE_H

/* The decode attention's (attn_decode_gqa_kernel), CUDA_ATTN_TL_STAMPS a block. */
enum {
    CUDA_ATTN_TL_ENTRY,   /* the block starts */
    CUDA_ATTN_TL_WAIT,    /* past the wait on the kernel before (pdl_begin) */
    CUDA_ATTN_TL_TILE,    /* its first tile of keys and values in shared memory */
    CUDA_ATTN_TL_KEYS,    /* its (last) split's keys done */
    CUDA_ATTN_TL_PARTIAL, /* that split's partial (or the output) written */
    CUDA_ATTN_TL_TICKET,  /* its count added to the row's counter (the merge in the launch) */
    CUDA_ATTN_TL_MERGE,   /* the last block: the splits merged */
    CUDA_ATTN_TL_END,     /* the block ends (a block without a split: only ENTRY and END) */
    CUDA_ATTN_TL_STAMPS
};

/* The fused router's cluster form's (router_cluster_kernel), CUDA_ROUTER_TL_STAMPS a block. */
enum {
    CUDA_ROUTER_TL_ENTRY,  /* the block starts */
    CUDA_ROUTER_TL_WAIT,   /* past the wait on the kernel before (pdl_begin) */
    CUDA_ROUTER_TL_ROW,    /* the token's row normed into shared memory */
    CUDA_ROUTER_TL_LOGITS, /* past the cluster's barrier: every logit in the first block */
    CUDA_ROUTER_TL_PROBS,  /* the first block: the softmax (thread 0's warp) */
    CUDA_ROUTER_TL_RANKS,  /* the first block: every slot named */
    CUDA_ROUTER_TL_END,    /* the block ends (the first block: the choice written) */
    CUDA_ROUTER_TL_STAMPS
};

#endif
