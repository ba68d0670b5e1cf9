#!/usr/bin/env bash
# Issue 17, session 65's fourth call: the L2 streaming windows on the routed experts' launches only (branch s65-l2:
# bench/device/s63a/l2stream.patch with the dense products unmarked; s65a.sh's varb as a build of its own, with its
# tests), against main (base): the windows' test, traces in turns (new, base, new2, base2, new3, base3),
# new+off-l2-stream, all-GPU and experts-in-RAM decode new/base, every CUDA test program on new (alltests.sh).
# Pack: PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-B with /tmp/p40/base (main's build, flat).
# Run: mkdir -p /tmp/c && tar -xJf .carry-B/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s65c.sh [SECONDS]
set -u
budget=${1:-330}
. bench/device/lib.sh
begin_bare s65c
pack_test 30 new "$C" check_cuda_kernels l2_stream "$O/kernels-l2-new.log"
grep -h "^l2 stream" "$O/kernels-l2-new.log"
for side in new base new2 base2 new3 base3 new+off-l2-stream; do pipe_trace gpu "$side"; done
decode_ab gpu new base
decode_ab ram new base
alltests_new
rm -f "$m"
finish s65c
