#!/usr/bin/env bash
# Session 43's third call: the decode attention on tensor cores, its second form (a cluster of 8 blocks a KV head
# and row, the splits merged through distributed shared memory; branch s43-cl). Pack in $C: bin/ (tensor cores off
# by default; check_cuda_fused's test_attn_mma, cuda_attn_time's "tensor cores" variant), var/ (-DAD_MMA_DEFAULT=1:
# the step's attention on tensor cores):
#   C=/tmp/c bash bench/device/s43c.sh [SECONDS]
# check_cuda_fused beside guild-mkmodel's qwen3-30b-a3b; cuda_attn_time --short (bin) and --timeline (var) at 128,
# 512, 2048 keys; guild-cuda-prof --gpu-experts none of bin and var in turns; all-GPU decode of both.
# Output under $OUT: s43c.log and s43c-files.tar.gz.
set -u
budget=${1:-400}
. bench/device/lib.sh # say, step, setup, finish
setup s43c
export CK_DEFAULT_TIMEOUT=300
m=/tmp/q30b.gguf
(step 120 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads 12 -q -o $m) &
mk=$!
step 100 "check_cuda_fused" sh -c '"$0" > "'"$O"'/check_cuda_fused.txt" 2>&1; st=$?;
    grep -E "^[0-9]+%|FAIL|fail|tensor cores" "'"$O"'/check_cuda_fused.txt" | head -n 24; exit $st' \
    "$B/tests/cuda/check_cuda_fused"
step 30 "cuda_attn_time --short (bin)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/time-bin.txt" |
    grep -o "^time: *[0-9]* keys, *[0-9]* rows\|scratch [0-9.]*\|tensor cores [0-9.]* [^;]*" | paste - - -' \
    "$B/tests/cuda/cuda_attn_time" --short 128 512 2048
step 30 "cuda_attn_time --timeline (var)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/tl-var.txt"' \
    "$C/var/cuda_attn_time" --timeline 128 512 2048
wait $mk
[ -s $m ] || { finish s43c; exit 1; }
pf() { case $1 in bin*) echo "$B/bench/guild-cuda-prof" ;; *) echo "$C/var/guild-cuda-prof" ;; esac; }
for side in var bin var2 bin2; do
    step 40 "guild-cuda-prof --gpu-experts none ($side)" sh -c '"$0" "$@" > "'"$O"'/prof-'"$side"'.txt" 2>&1;
        st=$?; grep -E "GPU busy|attn_decode" "'"$O"'/prof-'"$side"'.txt" | head -n 3; exit $st' \
        "$(pf $side)" -m "$m" --steps 32 --threads 14 --gpu-experts none
done
for side in var bin; do
    g=$B/guild
    [ $side = bin ] || g=$C/var/guild
    step 20 "all-GPU decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$g" bench run -m "$m" --populate 512 --runs 3 --gen 64 --json "$O/gpu-$side.json"
done
rm -f $m
finish s43c
