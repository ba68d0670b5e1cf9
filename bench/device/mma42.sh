#!/usr/bin/env bash
# Branch s42-mma (written in session 42, never run): the decode attention on tensor cores (cuda_set_attn_mma,
# attn_decode_mma_kernel). Pack in $C: bin/ (the branch's build: check_cuda_fused and cuda_attn_time at least):
#   C=/tmp/c bash bench/device/mma42.sh [SECONDS]
# 1. check_cuda_fused (its test_attn_mma cases: within 2e-4 of the FMA form, each row its own launch's bits, the
#    quantized rows, the counters; and every other case, unchanged);
# 2. cuda_attn_time --short at 128-2048 keys: the "tensor cores" variant beside the default ("different bits" is
#    expected for it: its rounding is the prefill kernel's).
# For the step (decode tok/s, guild-cuda-prof), build a var with NVCCFLAGS="... -DAD_MMA_DEFAULT=1": the process's
# decode attention then starts on tensor cores.
# Output under $OUT: mma42.log and mma42-files.tar.gz.
set -u
budget=${1:-200}
. bench/device/lib.sh # say, step, setup, finish
setup mma42
export CK_DEFAULT_TIMEOUT=300
step 150 "check_cuda_fused" sh -c '"$0" > "'"$O"'/check_cuda_fused.txt" 2>&1; st=$?;
    grep -E "^[0-9]+%|tensor cores|FAIL|fail" "'"$O"'/check_cuda_fused.txt" | head -n 20; exit $st' \
    "$B/tests/cuda/check_cuda_fused"
step 40 "cuda_attn_time --short" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/time.txt" |
    sed -E "s/; block a split.*tensor cores/; tensor cores/"' "$B/tests/cuda/cuda_attn_time" --short 128 512 2048
finish mma42
