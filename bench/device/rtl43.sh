#!/usr/bin/env bash
# Branch s43-router-tl (written in session 43, never run): where the fused router's 8.7 us a layer go. Pack in $C
# (bench/device/pack-xz.sh with PACK_FILES="tests/cuda/cuda_head_time tests/cuda/check_cuda_fused
# tests/cuda/check_cuda_kernels tests/cuda/check_cuda_backend"):
#   C=/tmp/c bash bench/device/rtl43.sh [SECONDS]
# 1. check_cuda_fused, check_cuda_kernels, check_cuda_backend at once (the router kernel took a parameter more);
# 2. cuda_head_time --timeline 1 4 16: the phases of token 0's choosing block (hand-over, norm, logits and the
#    cluster's barrier, softmax, ranks, the choice written), then its usual lines.
# Output under $OUT: rtl43.log and rtl43-files.tar.gz.
set -u
budget=${1:-200}
. bench/device/lib.sh # say, step, setup, finish
setup rtl43
export CK_DEFAULT_TIMEOUT=300
pids=
for t in check_cuda_fused check_cuda_kernels check_cuda_backend; do
    (step 120 "$t" sh -c '"$0" > "'"$O"'/$(basename "$0").txt" 2>&1; st=$?;
        grep -E "^[0-9]+%|:F:" "'"$O"'/$(basename "$0").txt" | head -n 4; exit $st' "$B/tests/cuda/$t") &
    pids="$pids $!"
done
# shellcheck disable=SC2086 # the pids
wait $pids
step 60 "cuda_head_time --timeline" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/head-tl.txt" | grep -E "^(timeline|head):"' \
    "$B/tests/cuda/cuda_head_time" --timeline 1 4 16
finish rtl43
