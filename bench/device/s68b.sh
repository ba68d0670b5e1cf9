#!/usr/bin/env bash
# Issue 17, session 68: s68a.sh trimmed to the device time left after five starts that found no machine (the
# router's choice in fewer instructions, branch s68-rank; its header says what and how it is packed). The order is
# what a landing needs first: check_cuda_fused's kernel cases (ties, NaN logits, underflow) on new, traces in turns,
# all-GPU decode, the router's phases in the step, then the backend cases and the router alone.
# Run: mkdir -p /tmp/c && tar -xJf .carry-H/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s68b.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s68b
pack_test 50 new "$C" check_cuda_fused kernel "$O/fused-kernel-new.log"
for side in new base new2 base2; do pipe_trace gpu "$side"; done
decode_ab gpu new base
step_tl router new base
pack_test 40 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
head_tl new base
rm -f "$m"
finish s68b
