#!/usr/bin/env bash
# Session 47's third call: branch s47's final build (the cluster norm in one exchange, the Q/K/V launch's Q6_K V
# split over two warps; pack in $C as s47a.sh's) against main's fec453c build in $C/base:
#   C=/tmp/c bash bench/device/s47c.sh [SECONDS]
# 1. bench/device/alltests.sh, three programs at a time;
# 2. cuda_head_time 1 (the block norm, Q/K/V and the output product alone);
# 3. guild-cuda-prof --gpu-experts none (issue 17's GPU time a layer): base, new, three times each in turns;
# 4. guild-cuda-prof with every expert on the GPU (one CUDA graph a step), twice each: dense_busy;
# 5. all-GPU decode twice each and experts-in-RAM decode three times each at 512 positions, in turns.
# Output under $OUT: s47c.log, alltests.log and s47c-files.tar.gz.
set -u
budget=${1:-400}
. bench/device/lib.sh # begin, say, step, finish, prof_ab, decode_ab, dense_busy, prof_bin
begin s47c
step 40 "cuda_head_time 1 (new)" sh -c '"$0" "$@" > "'"$O"'/head-new.txt" 2>&1; st=$?;
    grep -E "^(time|dense)" "'"$O"'/head-new.txt"; exit $st' "$B/tests/cuda/cuda_head_time" 1
prof_ab base new base2 new2 base3 new3
for side in base new base2 new2; do
    pb=$(prof_bin "$side")
    step 40 "guild-cuda-prof, every expert on the GPU ($side)" sh -c '"$0" "$@" > "'"$O"'/profg-'"$side"'.txt" 2>&1' \
        "$pb" -m "$m" --steps 32 --threads 14
    dense_busy "$O/profg-$side.txt" 48
done
for side in base new; do
    echo "-- $side"
    grep -E "^(router|rmsnorm_cl|matmul|attn_decode|qk_prep)" "$O/prof-$side.txt" | head -n 8
    echo "-- graph $side"
    grep -E "^(router|rmsnorm_cl|matmul|attn_decode|qk_prep)" "$O/profg-$side.txt" | head -n 8
done
decode_ab gpu base new base2 new2
decode_ab ram base new base2 new2 base3 new3
rm -f $m
finish s47c
