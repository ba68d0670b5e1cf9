#!/usr/bin/env bash
# Issue 17, prepared in session 61: the router's logits handed to its first block as async stores on an mbarrier
# (no MEMBAR.ALL.GPU on its path, the last of the three cluster kernels to keep one), with main's control flow (every
# block passes a relaxed phase 2 once all have sent their logits) and the last block's norm writes out of line
# (rc_norm_writes, __noinline__) so that ptxas keeps the first block's code right after its wait, as in main's
# layout (cuobjdump: inlined, the mbarrier form put the writes between; bench/results/clmbar61-h100-2026-12-06-s61.md).
# new = main + bench/device/s61c/router-mbx.patch; base = main's kernels (9068ac5 + cluster + router-batch, the
# kernels main has from 9d65544). What to read: the router alone with --cold-l2 (call 1 of session 61: it reproduces
# the step's cold code), then the step in turns. If new wins, land it after alltests on its full build.
# Pack: a worktree with main's kernels and the patch, the programs below built; /tmp/p40/base = main's:
#   PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager tools/guild-mkmodel bench/guild-cuda-prof
#     tests/cuda/cuda_head_time tests/cuda/cuda_attn_time tests/cuda/check_cuda_fused" \
#     bash bench/device/pack-xz.sh WORKTREE .carry-A
#   C=/tmp/c bash bench/device/s61c.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s61c
pack_test 60 new "$C" check_cuda_fused "" "$O/fused-new.log"
for mode in --cold-l2 --cold; do
    for side in new base; do
        grep_step 30 "cuda_head_time $mode --timeline 1 ($side)" "^timeline" "$O/head-tl$mode-$side.txt" \
            "$(cuda_tool "$side" cuda_head_time)" "$mode" --timeline 1
    done
done
for side in new base new2 base2; do pipe_trace gpu "$side"; done
step_tl router new base
decode_ab gpu new base
rm -f "$m"
finish s61c
