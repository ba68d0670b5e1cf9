#!/usr/bin/env bash
# Issue 17, session 65's sixth call: the routed experts' row prefetches as bulk prefetches whose lines are marked
# evict-first (branch s65-pf: prefetch_l2_stream, sm_90's cp.async.bulk.prefetch with an L2 cache policy; the up
# rows are what the launch's one window cannot cover), against main with the experts' windows (base): the kernel
# cases of check_cuda_fused (the expert pairs' bits), traces in turns (new, base, new2, base2, new3, base3), all-GPU
# decode new/base.
# Pack: PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager bench/guild-cuda-prof tools/guild-mkmodel
#       tests/cuda/check_cuda_fused" bash bench/device/pack-xz.sh WORKTREE .carry-B, /tmp/p40/base = main's build.
# Run: mkdir -p /tmp/c && tar -xJf .carry-B/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s65e.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s65e
pack_test 120 new "$C" check_cuda_fused kernel "$O/fused-kernel-new.log"
for side in new base new2 base2 new3 base3; do pipe_trace gpu "$side"; done
decode_ab gpu new base
rm -f "$m"
finish s65e
