#!/usr/bin/env bash
# Session 42's third call: the GQA decode attention with 16 warps a block for Qwen3's 8 query heads a KV head (two
# warps a head, each on half of a tile's keys: a shorter chain a warp), built as var (-DAD_GQA_WARPS=16) against
# base (8 warps). Pack in $C: bin/ (base: the build and its CUDA tests), var/ (the same tree with the define):
#   C=/tmp/c bash bench/device/s42c.sh [SECONDS]
# 1. var's CUDA tests that check the attention (rounding moves): check_cuda_kernels, check_cuda_fused,
#    check_cuda_backend (its strict F32-cache cases), check_cuda_batch, check_cuda_seq, 3 at a time;
# 2. cuda_attn_time --short at 128-2048 keys (1, 4, 16 rows), base and var in turns;
# 3. guild-cuda-prof --gpu-experts none (issue 17's measure) and all-GPU decode at 512, base and var in turns.
# Output under $OUT: s42c.log and s42c-files.tar.gz.
# Build: base main 04b6d95; var branch s42-wpb16 (b92e090) with NVCCFLAGS ... -DAD_GQA_WARPS=16 (not landed).
set -u
budget=${1:-400}
. bench/device/lib.sh # say, step, setup, finish, bin_of
setup s42c
export CK_DEFAULT_TIMEOUT=300
V=$C/var
t() { # NAME: var's test program NAME as a step
    step 200 "var: $1" sh -c '"$0" > "'"$O"'/var-'"$1"'.txt" 2>&1; st=$?;
        grep -E "^[0-9]+%|FAIL|fail" "'"$O"'/var-'"$1"'.txt" | head -n 8; exit $st' "$V/tests/cuda/$1"
}
(t check_cuda_backend) &
p1=$!
(t check_cuda_kernels; t check_cuda_batch) &
p2=$!
(t check_cuda_fused; t check_cuda_seq) &
p3=$!
wait $p1 $p2 $p3
for side in base var base2 var2; do
    d=$B
    case $side in var*) d=$V ;; esac
    step 40 "cuda_attn_time --short ($side)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/time-'"$side"'.txt"' \
        "$d/tests/cuda/cuda_attn_time" --short 128 256 512 2048
done
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s42c; exit 1; }
for side in base var base2 var2; do
    d=$B
    case $side in var*) d=$V ;; esac
    step 40 "guild-cuda-prof --gpu-experts none ($side)" sh -c '"$0" "$@" > "'"$O"'/prof-'"$side"'.txt" 2>&1;
        st=$?; grep -E "step wall|GPU busy|attn_decode" "'"$O"'/prof-'"$side"'.txt" | head -n 5; exit $st' \
        "$d/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --gpu-experts none
done
for side in base var base2 var2; do
    d=$B
    case $side in var*) d=$V ;; esac
    step 20 "all-GPU decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$d/guild" bench run -m "$m" --populate 512 --runs 3 --gen 64 --json "$O/gpu-$side.json"
done
rm -f $m
finish s42c
