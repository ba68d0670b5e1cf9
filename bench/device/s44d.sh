#!/usr/bin/env bash
# Session 44's fourth call: the CUDA test programs rebuilt from the session's last build (calls 1-3 ran session 43's
# test binaries: `make` does not rebuild check programs), the snapshot case beside other GPU work, and the profile of
# that build. Pack in $C (bench/device/pack-xz.sh, default files):
#   C=/tmp/c bash bench/device/s44d.sh [SECONDS]
# 1. bench/device/alltests.sh, three programs at a time;
# 2. CK_RUN_CASE=reruns check_cuda_backend eight times, two at a time beside check_cuda_kernels;
# 3. guild-cuda-prof --gpu-experts none on the qwen3-30b-a3b shape.
# Output under $OUT: s44d.log, alltests.log and s44d-files.tar.gz.
set -u
budget=${1:-300}
bash bench/device/alltests.sh 200 0 3 > /dev/null 2>&1
. bench/device/lib.sh # say, step, setup, finish
setup s44d
grep -E "rc=|Checks|FAIL|tests done" "$R/alltests.log" | tail -n 40
export CK_DEFAULT_TIMEOUT=300
(timeout -s KILL 60 sh -c 'while :; do "$0" > /dev/null 2>&1; done' "$B/tests/cuda/check_cuda_kernels") &
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
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
step 40 "guild-cuda-prof --gpu-experts none" sh -c '"$0" "$@" > "'"$O"'/prof.txt" 2>&1; st=$?;
    grep -E "step wall|GPU busy|^(router|matmul|attn|rmsnorm|qk_prep)" "'"$O"'/prof.txt" | head -n 12; exit $st' \
    "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --gpu-experts none
rm -f $m
finish s44d
