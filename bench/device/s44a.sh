#!/usr/bin/env bash
# Session 44's first call, on branch s43-router-tl (main dcfe09b + the router's timeline): the CUDA tests of the
# build (run-time cluster check of ee3e17e/1f99029, cluster.cuh of dcfe09b: never run on the device), the
# intermittent snapshot case beside other GPU work, the router's timeline, and the profile's kernel names (the
# cluster forms must be the ones that run). Pack in $C (bench/device/pack-xz.sh, default files):
#   C=/tmp/c bash bench/device/s44a.sh [SECONDS]
# 1. bench/device/alltests.sh, three programs at a time (its log in $OUT/alltests.log);
# 2. CK_RUN_CASE=reruns check_cuda_backend eight times, two at a time beside check_cuda_kernels;
# 3. cuda_head_time --timeline 1 4 16;
# 4. guild-cuda-prof --gpu-experts none on the qwen3-30b-a3b shape: the per-kernel table.
# Output under $OUT: s44a.log and s44a-files.tar.gz.
set -u
budget=${1:-480}
bash bench/device/alltests.sh 200 0 3 > /dev/null 2>&1
. bench/device/lib.sh # say, step, setup, finish
setup s44a
grep -E "rc=|Checks|FAIL|tests done" "$R/alltests.log" | tail -n 40
export CK_DEFAULT_TIMEOUT=300
(timeout -s KILL 100 sh -c 'while :; do "$0" > /dev/null 2>&1; done' "$B/tests/cuda/check_cuda_kernels") &
stress=$!
p=
for i in 1 2 3 4; do
    for j in a b; do
        (step 50 "reruns $i$j" sh -c 'CK_RUN_CASE=reruns "$0" > "'"$O"'/reruns-'"$i$j"'.txt" 2>&1; st=$?;
            grep -E "^[0-9]+%|:F:" "'"$O"'/reruns-'"$i$j"'.txt" | head -n 3; exit $st' "$B/tests/cuda/check_cuda_backend") &
        p="$p $!"
    done
    # shellcheck disable=SC2086
    wait $p
    p=
done
kill $stress 2> /dev/null
pkill -f check_cuda_kernels 2> /dev/null
step 60 "cuda_head_time --timeline" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/head-tl.txt" | grep -E "^(timeline|head)"' \
    "$B/tests/cuda/cuda_head_time" --timeline 1 4 16
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
step 40 "guild-cuda-prof --gpu-experts none" sh -c '"$0" "$@" > "'"$O"'/prof.txt" 2>&1; st=$?; head -n 40 "'"$O"'/prof.txt"; exit $st' \
    "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --gpu-experts none
rm -f $m
finish s44a
