#!/usr/bin/env bash
# Issue 17, session 65's seventh call: the routed experts' first launch (gate and up) asks the next layer's Q, K and V
# weights into L2 before its wait (branch s65-l2next: cuda_expert_pairs_l2_next), so that the block norm and the
# Q/K/V products after it (whose sum stayed the same while the norm got faster: the products wait for the weights
# their own launch asks for) find them there; against main (base, the experts' windows): check_cuda_fused's kernel
# and backend cases on new, traces in turns (new, base, new2, base2, new3, base3), all-GPU decode new/base.
# Pack: PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager bench/guild-cuda-prof tools/guild-mkmodel
#       tests/cuda/check_cuda_fused" bash bench/device/pack-xz.sh WORKTREE OUT (OUT absolute), base = main's build.
# Run: mkdir -p /tmp/c && tar -xJf .carry-B/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s65f.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s65f
pack_test 60 new "$C" check_cuda_fused kernel "$O/fused-kernel-new.log"
pack_test 90 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
for side in new base new2 base2 new3 base3; do pipe_trace gpu "$side"; done
decode_ab gpu new base
rm -f "$m"
finish s65f
