#!/usr/bin/env bash
# Session 45's call, written without a device (none was lent) for the next session's first call: branch s45 against
# main (base: guild, workers, guild-cuda-prof, cuda_head_time in $C/base). s45 holds the router's logits and the
# fused norm's squares and scale handed over by transaction barriers (--cuda-off cluster-mbar turns both off) and
# the one-token products split over warps (--cuda-off mm-split). Pack in $C (bench/device/pack-xz.sh, default files,
# the CUDA test programs built by name first, with the base build):
#   C=/tmp/c bash bench/device/s45a.sh [SECONDS]
# 1. bench/device/alltests.sh, three programs at a time (check_cuda_fused: the norm's and the router's cluster forms
#    both ways; check_cuda_kernels: the products both ways);
# 2. cuda_head_time --timeline 1 16 (the router's phases), base then new;
# 3. guild-cuda-prof --gpu-experts none on the qwen3-30b-a3b shape: base, new, new without the transaction barriers,
#    new without the split products, base2, new2 (issue 17's GPU time a layer, each kernel's share);
# 4. all-GPU and experts-in-RAM decode at 512 positions, base and new in turns, twice each.
# Output under $OUT: s45a.log, alltests.log and s45a-files.tar.gz.
set -u
budget=${1:-420}
bash bench/device/alltests.sh 130 0 3 > /dev/null 2>&1
. bench/device/lib.sh # say, step, setup, finish, prof_ab, decode_ab
setup s45a
grep -E "rc=|Checks|FAIL|tests done" "$R/alltests.log" | grep -v "^rc=0" | tail -n 30
for side in base new; do
    ht=$B/tests/cuda/cuda_head_time
    [ $side = base ] && ht=$BASE/cuda_head_time
    step 20 "cuda_head_time --timeline ($side)" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/head-tl-'"$side"'.txt" | grep -E "^timeline"' \
        "$ht" --timeline 1 16
done
m=/tmp/q30b.gguf
step 40 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
prof_ab base new new+off-cluster-mbar new+off-mm-split base2 new2
for side in base new new+off-cluster-mbar new+off-mm-split; do
    echo "-- $side"
    grep -E "^(router|rmsnorm_cl|matmul)" "$O/prof-$side.txt" | head -n 6
done
decode_ab gpu base new base2 new2
decode_ab ram base new base2 new2
rm -f $m
finish s45a
