#!/usr/bin/env bash
# Session 47's first call on branch s47 (pack in $C, bench/device/pack-xz.sh, the CUDA test programs built by name
# first; base: main's fec453c build in $C/base, with its cuda_head_time):
#   C=/tmp/c bash bench/device/s47a.sh [SECONDS]
# What s47 changes: the cluster kernels' global stores (the fused norm's x update, the router's logits) after their
# cluster barrier's release, not before it; a step's Q6_K V split over two warps a row in the two-type Q/K/V launch.
# 1. bench/device/alltests.sh, three programs at a time;
# 2. cuda_head_time at one token, base and new: the FFN head, the block norm, qk_prepare, Q/K/V and the output
#    product alone in graphs of their own; then --timeline 1 (the router's phases), base and new;
# 3. guild-cuda-prof --gpu-experts none (issue 17's GPU time a layer): base, new, base2, new2;
# 4. guild-cuda-prof with every expert on the GPU (one CUDA graph a step), base and new: dense_busy;
# 5. all-GPU and experts-in-RAM decode at 512 positions, base and new in turns, twice each.
# Output under $OUT: s47a.log, alltests.log and s47a-files.tar.gz.
set -u
budget=${1:-420}
bash bench/device/alltests.sh 130 0 3 > /dev/null 2>&1
. bench/device/lib.sh # say, step, setup, finish, prof_ab, decode_ab, dense_busy, prof_bin
setup s47a
grep -E "rc=|Checks|FAIL|tests done" "$R/alltests.log" | grep -v "^rc=0" | tail -n 30
for side in base new; do
    hb=$B/tests/cuda/cuda_head_time
    [ "$side" = base ] && hb=$BASE/cuda_head_time
    step 40 "cuda_head_time 1 ($side)" sh -c '"$0" "$@" > "'"$O"'/head-'"$side"'.txt" 2>&1; st=$?;
        grep -E "^(head|norm|qk|dense)" "'"$O"'/head-'"$side"'.txt"; exit $st' "$hb" --forms 16,8 1
    step 30 "cuda_head_time --timeline 1 ($side)" sh -c '"$0" "$@" > "'"$O"'/head-tl-'"$side"'.txt" 2>&1; st=$?;
        grep -E "^(timeline|head)" "'"$O"'/head-tl-'"$side"'.txt"; exit $st' "$hb" --timeline 1
done
m=/tmp/q30b.gguf
step 40 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
prof_ab base new base2 new2
for side in base new; do
    pb=$(prof_bin "$side")
    step 40 "guild-cuda-prof, every expert on the GPU ($side)" sh -c '"$0" "$@" > "'"$O"'/profg-'"$side"'.txt" 2>&1' \
        "$pb" -m "$m" --steps 32 --threads 14
    dense_busy "$O/profg-$side.txt" 48
done
for side in base new base2 new2; do
    echo "-- $side"
    grep -E "^(router|rmsnorm_cl|matmul|attn_decode|qk_prep)" "$O/prof-$side.txt" | head -n 8
done
for side in base new; do
    echo "-- graph $side"
    grep -E "^(router|rmsnorm_cl|matmul|attn_decode|qk_prep)" "$O/profg-$side.txt" | head -n 8
done
decode_ab gpu base new base2 new2
decode_ab ram base new base2 new2
rm -f $m
finish s47a
