#!/usr/bin/env bash
# Session 42's ninth call: the GQA decode attention's key loop unrolled further (AD_KEY_UNROLL, branch s42-unroll):
# s42h's ncu says its warps stall on dependent arithmetic (wait, short scoreboard), 2 warps a scheduler; more key
# steps unrolled together give each warp more independent work. The same operations in the same order on each key:
# the same bits. Pack in $C: bin/ (unroll 8), var/ (unroll 4), base/ (main: unroll 2), each cuda_attn_time and
# guild-cuda-prof:
#   C=/tmp/c bash bench/device/s42i.sh [SECONDS]
# cuda_attn_time --short at 128-2048 keys, then guild-cuda-prof --gpu-experts none, the three in turns.
# Output under $OUT: s42i.log and s42i-files.tar.gz.
# Builds: branch s42-unroll's first form (an AD_KEY_UNROLL define, set to 8 for bin/ and 4 for var/); base main
# 04b6d95. Landed: four key steps (dc7e4c1).
set -u
budget=${1:-200}
. bench/device/lib.sh # say, step, setup, finish
setup s42i
dir() { case $1 in base*) echo "$BASE" ;; var*) echo "$C/var" ;; *) echo "$B" ;; esac; }
at() { [ -x "$(dir "$1")/tests/cuda/cuda_attn_time" ] && echo "$(dir "$1")/tests/cuda/cuda_attn_time" ||
    echo "$(dir "$1")/cuda_attn_time"; }
pf() { [ -x "$(dir "$1")/bench/guild-cuda-prof" ] && echo "$(dir "$1")/bench/guild-cuda-prof" ||
    echo "$(dir "$1")/guild-cuda-prof"; }
for side in base new var base2 new2 var2; do
    step 30 "cuda_attn_time --short ($side)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/time-'"$side"'.txt" |
        sed -E "s/; block a split.*//"' "$(at $side)" --short 128 512 2048
done
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s42i; exit 1; }
for side in new var base new2 var2 base2; do
    step 40 "guild-cuda-prof --gpu-experts none ($side)" sh -c '"$0" "$@" > "'"$O"'/prof-'"$side"'.txt" 2>&1;
        st=$?; grep -E "GPU busy|attn_decode" "'"$O"'/prof-'"$side"'.txt" | head -n 3; exit $st' \
        "$(pf $side)" -m "$m" --steps 32 --threads 14 --gpu-experts none
done
rm -f $m
finish s42i
