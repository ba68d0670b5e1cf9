#!/usr/bin/env bash
# Issue 17, session 64's call: session 63's prepared measurement (its s63a.sh, folded in here: the weights a decode step
# reads once marked as streaming in L2, bench/device/s63a/l2stream.patch; sides new, base, var, new+off-l2-stream in
# turns, the windows' test, the products' bit tests, decode all-GPU and experts in RAM) on a build that also has
# session 64's --gpu-mem auto with other processes' memory left out (gpu-worker/dense/cuda/cuda_free_mem.h):
# check_cuda_free_mem alone, then `guild plan` and a short decode beside a process holding all but 12 GiB of the
# device (the test program's --hold), where auto must plan against the 12 GiB that process leaves.
# Builds: new = main + bench/device/s63a/l2stream.patch (branch s64-l2); var and base as s63a.sh (/tmp/p40/var,
# /tmp/p40/base: session 63's, base = 0972645).
# Pack: PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-B; C=/tmp/c bash bench/device/s64a.sh [SECONDS]
set -u
budget=${1:-300}
. bench/device/lib.sh
begin_bare s64a
for side in new base var new+off-l2-stream new2 base2; do pipe_trace gpu "$side"; done
pack_test 30 new "$C" check_cuda_kernels l2_stream "$O/kernels-l2-new.log"
pack_test 40 new "$C" check_cuda_free_mem "" "$O/free-mem-new.log"
grep -h "^free_mem:" "$O/free-mem-new.log"
decode_ab gpu new base
# beside a process that holds all but 12 GiB of the device: what auto plans against, and that it runs
tot=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
hold=$((tot - 12288))
(sleep 60 | "$B/tests/cuda/check_cuda_free_mem" --hold "$hold" > "$O/hold.txt" 2>&1) &
for _ in $(seq 1 40); do grep -q held "$O/hold.txt" 2> /dev/null && break; sleep 0.5; done
say "holder: $(cat "$O/hold.txt"); $(nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader)"
grep_step 20 "guild plan beside the holder" "gpu-mem|resident|experts on" "$O/plan-held.txt" "$B/guild" plan -m "$m" \
    --backend cuda
grep_step 40 "decode beside the holder" "gpu-mem|run [0-9]:|^ +512 " "$O/decode-held.txt" "$B/guild" bench run -m "$m" \
    --populate 512 --runs 1 --gen 32 -v
pkill -f "check_cuda_free_mem --hold" 2> /dev/null
pack_test 60 new "$C" check_cuda_kernels matmul "$O/kernels-matmul-new.log"
pack_test 60 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
step_tl attn new base
decode_ab gpu var new2 base2
decode_ab ram new base
rm -f "$m"
finish s64a
