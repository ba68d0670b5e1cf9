/* bench/prof_timeline.h — the phases of one launch of the fused router's cluster form or of the decode attention,
 * from the %globaltimer stamps its blocks write where a timeline is set (cuda_set_router_timeline,
 * cuda_set_attn_timeline: gpu-worker/dense/cuda/cuda_kernels.h). guild-cuda-prof --timeline takes them inside the
 * decode step (the last layer's launch of each step), where tests/cuda/cuda_head_time and cuda_attn_time take them
 * in graphs of the kernel's own launches: the two side by side say which phase grows in the step. Pure
 * arithmetic on the stamps, tested without a GPU (tests/check_prof_summary). */
#ifndef GUILD_BENCH_PROF_TIMELINE_H
#define GUILD_BENCH_PROF_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

/* The router's phases (us): token 0's first block (the one that chooses): entry -> past its wait on the kernel
 * before, -> its row normed, -> every logit in (the cluster's barrier), -> the softmax, -> the ranks, -> the
 * choice written; then over every block: the waits' spread (first to last block past its wait), the span (first
 * wait to last end), and the blocks. */
enum {
    PROF_TL_R_ENTRY_WAIT, PROF_TL_R_ROW, PROF_TL_R_LOGITS, PROF_TL_R_PROBS, PROF_TL_R_RANKS, PROF_TL_R_END,
    PROF_TL_R_WAITS, PROF_TL_R_SPAN, PROF_TL_R_BLOCKS, PROF_TL_R_N
};

/* The attention's phases (us): the working block (one with a split) that ends last: entry -> past its wait, ->
 * its first tile in, -> its keys done, -> its partial written, -> its count added, -> the splits merged (0 where
 * it merged none), -> its end; then over the working blocks: the waits' spread, the span (first wait to last
 * end of any block), and the working blocks. */
enum {
    PROF_TL_A_ENTRY_WAIT, PROF_TL_A_TILE, PROF_TL_A_KEYS, PROF_TL_A_PARTIAL, PROF_TL_A_TICKET, PROF_TL_A_MERGE,
    PROF_TL_A_END, PROF_TL_A_WAITS, PROF_TL_A_SPAN, PROF_TL_A_BLOCKS, PROF_TL_A_N
};

/* The router's phases of the stamps st[0 .. n_slots * CUDA_ROUTER_TL_STAMPS) (a cleared buffer, then one launch:
 * block (x, y) at slot y CB + x; slot 0 is token 0's first block) into v[PROF_TL_R_N]. 0, or -1 when slot 0 holds
 * no complete timeline (the launch did not run in the cluster form, or wrote elsewhere). */
int prof_timeline_router(const uint64_t *st, size_t n_slots, double *v);

/* The attention's phases of st[0 .. n_slots * CUDA_ATTN_TL_STAMPS) (a cleared buffer, then one launch) into
 * v[PROF_TL_A_N]. 0, or -1 when no working block wrote. */
int prof_timeline_attn(const uint64_t *st, size_t n_slots, double *v);

/* The phases' names, for the report: n (optional) gets their count. */
const char *const *prof_timeline_router_names(int *n);
const char *const *prof_timeline_attn_names(int *n);

#endif
