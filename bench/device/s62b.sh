#!/usr/bin/env bash
# Issue 17, session 62's second call: s62a's form (the decode row's heads prepared in the attention's launch) with
# the prepared heads in shared memory the launch already has (the second tile stage, the merge's place): s62a's
# form took 9 KB more and its launch was 4 us slower in the step even with the preparation off (--cuda-off qk-attn),
# 14.3 us with it against main's 6.85 + 1.87 (bench/results/qkattn62-h100-2026-12-06-s62.md). Sides: new (this
# build), base (main's, flat in /tmp/p40/base), new+off-qk-attn; traces in turns, the step's attention phases,
# check_cuda_attn_prep and check_cuda_fused's backend cases, alltests.sh on new only when its first trace beats
# base's (the landing's tests in the same call), all-GPU decode (with the experts in RAM too when RAM=1).
# Pack: PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-A; C=/tmp/c bash bench/device/s62b.sh [SECONDS]
set -u
budget=${1:-240}
. bench/device/lib.sh
begin_bare s62b
for side in new base new+off-qk-attn new2 base2 new2+off-qk-attn; do pipe_trace gpu "$side"; done
step_tl attn new base
pack_test 60 new "$C" check_cuda_attn_prep "" "$O/attn-prep-new.log"
pack_test 90 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
busy() { grep -oE 'dense busy a layer: [0-9.]+' "$O/trace-gpu-$1.txt" 2> /dev/null | grep -oE '[0-9.]+$'; }
if awk -v n="$(busy new)" -v b="$(busy base)" 'BEGIN {exit !(n != "" && b != "" && n + 0 < b + 0)}'; then
    alltests_new
else
    say "new ($(busy new) us) does not beat base ($(busy base) us): no alltests.sh"
fi
decode_ab gpu new base
[ "${RAM:-0}" = 1 ] && decode_ab ram new base
rm -f "$m"
finish s62b
