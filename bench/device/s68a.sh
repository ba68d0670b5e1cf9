#!/usr/bin/env bash
# Issue 17, session 68's second call: the cluster router's choice in fewer instructions (branch s68-rank). Its ranks
# count only the experts above (one comparison an element, not rf_rank's three with the tie's order); a tie among the
# first k shows as a slot written twice or left empty, and then the block ranks again in rf_rank's order. The slots
# keep their weights beside their experts, so the last warp's renormalisation reads them from shared memory in slot
# order (no chain of shuffles, no second dependent load). The same bits. new = s68-rank, base = main (681adf2's
# kernels, with its guild-cuda-prof and cuda_head_time beside it).
# check_cuda_fused's kernel (ties, NaN logits, underflow) and backend cases on new; the router alone (cuda_head_time
# --timeline 1) in both; traces in turns; the router's phases in the step in both; all-GPU decode.
# Pack: PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager bench/guild-cuda-prof tools/guild-mkmodel
#       tests/cuda/check_cuda_fused tests/cuda/cuda_head_time" bash bench/device/pack-xz.sh WORKTREE OUT
#       (with /tmp/p40/base holding main's guild programs, guild-cuda-prof and cuda_head_time).
# Run: mkdir -p /tmp/c && tar -xJf .carry-H/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s68a.sh [SECONDS]
set -u
budget=${1:-300}
. bench/device/lib.sh
begin_bare s68a
pack_test 60 new "$C" check_cuda_fused kernel "$O/fused-kernel-new.log"
pack_test 60 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
head_tl new base
for side in new base new2 base2 new3 base3; do pipe_trace gpu "$side"; done
step_tl router new base
decode_ab gpu new base
rm -f "$m"
finish s68a
