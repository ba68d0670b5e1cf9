#!/usr/bin/env bash
# Session 43's first call: branch s42-mma (the decode attention on tensor cores, written in session 42, never run).
# Pack in $C: bin/ (s42-mma rebased on main d4ab4ce: tensor cores off by default; the CUDA tests), var/ (the same,
# -DAD_MMA_DEFAULT=1: the step's attention on tensor cores, splits of 256 keys), var128/ (-DAD_MMA_DEFAULT=1
# -DAD_MMA_SPLIT=128):
#   C=/tmp/c bash bench/device/s43a.sh [SECONDS]
# 1. check_cuda_kernels, check_cuda_batch, check_cuda_seq (session 42's unroll, never run through them) and
#    check_cuda_fused (its test_attn_mma cases) at once, beside guild-mkmodel's qwen3-30b-a3b;
# 2. cuda_attn_time --short at 128-2048 keys (bin: tensor cores at 256-key splits; var128: at 128);
# 3. guild-cuda-prof --gpu-experts none of bin, var, var128 in turns; all-GPU decode of the three.
# Output under $OUT: s43a.log and s43a-files.tar.gz.
set -u
budget=${1:-540}
. bench/device/lib.sh # say, step, setup, finish
setup s43a
export CK_DEFAULT_TIMEOUT=300
m=/tmp/q30b.gguf
pids=
for t in check_cuda_kernels check_cuda_batch check_cuda_seq check_cuda_fused; do
    (step 170 "$t" sh -c '"$0" > "'"$O"'/$(basename "$0").txt" 2>&1; st=$?;
        grep -E "^[0-9]+%|FAIL|tensor cores" "'"$O"'/$(basename "$0").txt" | head -n 12; exit $st' "$B/tests/cuda/$t") &
    pids="$pids $!"
done
(step 120 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads 8 -q -o $m) &
pids="$pids $!"
# shellcheck disable=SC2086 # the pids
wait $pids
for side in bin var128; do
    at=$B/tests/cuda/cuda_attn_time
    [ $side = bin ] || at=$C/$side/cuda_attn_time
    step 40 "cuda_attn_time --short ($side)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/time-'"$side"'.txt" |
        sed -E "s/; block a split.*//"' "$at" --short 128 512 2048
done
[ -s $m ] || { finish s43a; exit 1; }
pf() { case $1 in bin*) echo "$B/bench/guild-cuda-prof" ;; *) echo "$C/${1%2}/guild-cuda-prof" ;; esac; }
for side in bin var var128 bin2 var2; do
    step 40 "guild-cuda-prof --gpu-experts none ($side)" sh -c '"$0" "$@" > "'"$O"'/prof-'"$side"'.txt" 2>&1;
        st=$?; grep -E "step wall|GPU busy|attn_decode" "'"$O"'/prof-'"$side"'.txt" | head -n 4; exit $st' \
        "$(pf $side)" -m "$m" --steps 32 --threads 14 --gpu-experts none
done
for side in bin var var128; do
    g=$B/guild
    [ $side = bin ] || g=$C/$side/guild
    step 20 "all-GPU decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$g" bench run -m "$m" --populate 512 --runs 3 --gen 64 --json "$O/gpu-$side.json"
done
rm -f $m
finish s43a
