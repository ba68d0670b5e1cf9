#!/usr/bin/env bash
# Session 39's third attention call (issue 17): the key-a-lane tile's timeline and times against the kernel before
# it, from the repo root with a pack in $C (bin/tests/cuda: cuda_attn_time, check_cuda_backend; base/cuda_attn_time
# of 61930bb):
#   C=/tmp/c bash bench/device/attn39c.sh [SECONDS]
# Output under $OUT: attn39c.log and attn39c-files.tar.gz.
set -u
budget=${1:-120}
. bench/device/lib.sh # say, step, setup, finish
setup attn39c
step 30 "cuda_attn_time --timeline (new)" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/timeline-new.txt"' \
    "$B/tests/cuda/cuda_attn_time" --timeline 32 64 128 512 2048
step 30 "cuda_attn_time --timeline (base)" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/timeline-base.txt"' \
    "$BASE/cuda_attn_time" --timeline 32 64 128 512 2048
for side in new base; do
    bin=$B/tests/cuda/cuda_attn_time
    [ $side = base ] && bin=$BASE/cuda_attn_time
    step 25 "cuda_attn_time --short ($side)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/time-'"$side"'.txt"' \
        "$bin" --short 128 512
done
step 60 "check_cuda_backend greedy" sh -c 'CK_RUN_CASE=greedy "$0" > "'"$O"'/backend-greedy.txt" 2>&1; st=$?;
    grep -E "f32 KV|Checks|:F:" "'"$O"'/backend-greedy.txt" | head -n 40; exit $st' "$B/tests/cuda/check_cuda_backend"
finish attn39c
