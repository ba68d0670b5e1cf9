#!/usr/bin/env bash
# Session 46's first call on branch s46 (pack in $C, bench/device/pack-xz.sh, the CUDA test programs built by name
# first; base: main's 839a280 build in $C/base; var: the s46 build with every dense kernel's programmatic launch
# letting its dependents go before its wait, -DGUILD_PDL_EARLY, in $C/var):
#   C=/tmp/c bash bench/device/s46a.sh [SECONDS]
# 1. bench/device/alltests.sh, three programs at a time (check_cuda_kernels: the split products both ways);
# 2. guild-cuda-prof --gpu-experts none (issue 17's GPU time a layer): base, new, new without the split, var, base2,
#    new2, var2;
# 3. guild-cuda-prof with every expert on the GPU (CUDA graphs: the dense step's kernels as the pipeline launches
#    them), base, new, var: the dense kernels' busy a layer (dense_busy);
# 4. all-GPU and experts-in-RAM decode at 512 positions, base, new and var in turns, twice each.
# Output under $OUT: s46a.log, alltests.log and s46a-files.tar.gz.
set -u
budget=${1:-420}
bash bench/device/alltests.sh 130 0 3 > /dev/null 2>&1
. bench/device/lib.sh # say, step, setup, finish, prof_ab, decode_ab, dense_busy, prof_bin
setup s46a
grep -E "rc=|Checks|FAIL|tests done" "$R/alltests.log" | grep -v "^rc=0" | tail -n 30
m=/tmp/q30b.gguf
step 40 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
prof_ab base new new+off-mm-split var base2 new2 var2
for side in base new var; do
    pb=$(prof_bin "$side")
    step 40 "guild-cuda-prof, every expert on the GPU ($side)" sh -c '"$0" "$@" > "'"$O"'/profg-'"$side"'.txt" 2>&1' \
        "$pb" -m "$m" --steps 32 --threads 14
    dense_busy "$O/profg-$side.txt" 48
done
for side in base new new+off-mm-split var; do
    echo "-- $side"
    grep -E "^(router|rmsnorm_cl|matmul|attn_decode|qk_prep)" "$O/prof-$side.txt" | head -n 8
done
decode_ab gpu base new var base2 new2 var2
decode_ab ram base new var base2 new2 var2
rm -f $m
finish s46a
