#!/usr/bin/env bash
# Session 42's second call: the next layer's dense weights asked into L2 while the CPU side computes a layer's
# experts (cuda_l2_next.c), A/B in one build by --cuda-off next-weights. Pack in $C: bin/ (the build, its CUDA
# tests):
#   C=/tmp/c bash bench/device/s42b.sh [SECONDS]
# 1. check_cuda_fused (the backend with host experts and the prefetch against the reference without it, bit for
#    bit) beside the model's writing;
# 2. issue 17's GPU time a layer (guild-cuda-prof --gpu-experts none), on/off/on/off;
# 3. decode with every expert in RAM (guild bench run --gpu-experts none, populate 512), on/off/on/off.
# Output under $OUT: s42b.log and s42b-files.tar.gz.
# Build: branch s42-l2next (b5e31e0, not landed: no gain).
set -u
budget=${1:-300}
. bench/device/lib.sh # say, step, setup, finish
setup s42b
export CK_DEFAULT_TIMEOUT=300
(step 150 "check_cuda_fused" sh -c '"$0" > "'"$O"'/check_cuda_fused.txt" 2>&1; st=$?;
    grep -E "^[0-9]+%|host experts|FAIL|fail" "'"$O"'/check_cuda_fused.txt" | head -n 12; exit $st' \
    "$B/tests/cuda/check_cuda_fused") &
p1=$!
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads 8 -q -o $m
wait $p1
[ -s $m ] || { finish s42b; exit 1; }
for side in on off on2 off2; do
    off=""
    case $side in off*) off="--cuda-off next-weights" ;; esac
    # shellcheck disable=SC2086 # off: words without blanks
    step 40 "guild-cuda-prof --gpu-experts none ($side)" sh -c '"$0" "$@" > "'"$O"'/prof-'"$side"'.txt" 2>&1;
        st=$?; grep -E "step wall|GPU busy|attn_decode|matmul|router_cluster|rmsnorm_kernel<true, 2|qk_prep|l2_pref" \
        "'"$O"'/prof-'"$side"'.txt" | head -n 12; exit $st' \
        "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --gpu-experts none $off
done
for side in on off on2 off2; do
    off=""
    case $side in off*) off="--cuda-off next-weights" ;; esac
    # shellcheck disable=SC2086
    step 35 "experts in RAM decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$B/guild" bench run -m "$m" --populate 512 --runs 3 --gen 48 --gpu-experts none $off \
        --json "$O/ram-$side.json"
done
rm -f $m
finish s42b
