#!/usr/bin/env bash
# Session 39's attention timeline (issue 17): where the decode attention's ~11 us a layer at a few hundred keys goes,
# from the repo root with a pack unpacked in $C (bin/ with tests/cuda/cuda_attn_time and check_cuda_fused):
#   C=/tmp/c bash bench/device/attn39.sh [SECONDS]
# 1. check_cuda_fused (the attention's launch forms bit for bit, with the timeline's parameter in the kernel);
# 2. cuda_attn_time --timeline at 32-2048 keys, 1, 4 and 16 rows (each block's stamps, the phases of the block that
#    ends last, the hand-over from the launch before);
# 3. cuda_attn_time --short 128 512 (the same build's launch forms, for the times without stamps).
# Output under $OUT: attn39.log and attn39-files.tar.gz.
set -u
budget=${1:-200}
. bench/device/lib.sh # say, step, setup, finish
setup attn39
step 120 "check_cuda_fused" sh -c '"$0" > "'"$O"'/check_cuda_fused.txt" 2>&1; st=$?;
    tail -n 3 "'"$O"'/check_cuda_fused.txt"; exit $st' "$B/tests/cuda/check_cuda_fused"
for i in 1 2; do
    step 40 "cuda_attn_time --timeline ($i)" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/timeline-'"$i"'.txt"' \
        "$B/tests/cuda/cuda_attn_time" --timeline 32 64 128 256 512 1024 2048
done
step 40 "cuda_attn_time --short 128 512" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/time.txt"' \
    "$B/tests/cuda/cuda_attn_time" --short 128 512
finish attn39
