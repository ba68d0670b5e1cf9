#!/usr/bin/env bash
# Issue 17, session 65's ninth call: qk_prepare with a head a warp (branch s65-qkw: qk_prepare_warp_kernel, no block
# barrier nor shared memory in a head's chain; the block form stalled on its barriers in s65g.sh's profile), against
# main (base): check_cuda_kernels' qk_prepare (64 cases: both forms against the three kernels) and check_cuda_fused's
# backend cases on new, traces in turns (new, base, new2, base2, new3, base3), all-GPU decode new/base.
# Pack: PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager bench/guild-cuda-prof tools/guild-mkmodel
#       tests/cuda/check_cuda_kernels tests/cuda/check_cuda_fused" bash bench/device/pack-xz.sh WORKTREE OUT.
# Run: mkdir -p /tmp/c && tar -xJf .carry-B/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s65h.sh [SECONDS]
set -u
budget=${1:-150}
. bench/device/lib.sh
begin_bare s65h
pack_test 40 new "$C" check_cuda_kernels qk_prepare "$O/kernels-qk-new.log"
pack_test 60 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
for side in new base new2 base2 new3 base3; do pipe_trace gpu "$side"; done
decode_ab gpu new base
rm -f "$m"
finish s65h
