#!/usr/bin/env bash
# Session 43's second call: where the tensor-core decode attention's time goes (branch s42-mma with timeline stamps,
# its first tile asked for before Q's fragments are made). Pack in $C: bin/ (tensor cores off by default), var/
# (-DAD_MMA_DEFAULT=1), var128/ (also -DAD_MMA_SPLIT=128), each cuda_attn_time (and check_cuda_fused):
#   C=/tmp/c bash bench/device/s43b.sh [SECONDS]
# check_cuda_fused (bin: test_attn_mma), then cuda_attn_time --timeline at 128, 512, 2048 keys of bin (the FMA form),
# var and var128. Output under $OUT: s43b.log and s43b-files.tar.gz.
set -u
budget=${1:-200}
. bench/device/lib.sh # say, step, setup, finish
setup s43b
export CK_DEFAULT_TIMEOUT=300
step 100 "check_cuda_fused" sh -c '"$0" > "'"$O"'/check_cuda_fused.txt" 2>&1; st=$?;
    grep -E "^[0-9]+%|FAIL|tensor cores, 32/4 heads of 128,  (511|600)" "'"$O"'/check_cuda_fused.txt" | head -n 12; exit $st' \
    "$B/tests/cuda/check_cuda_fused"
for side in bin var var128; do
    at=$B/tests/cuda/cuda_attn_time
    [ $side = bin ] || at=$C/$side/cuda_attn_time
    step 30 "cuda_attn_time --timeline ($side)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/tl-'"$side"'.txt"' \
        "$at" --timeline 128 512 2048
done
finish s43b
