#!/usr/bin/env bash
# Issue 6's real-size benchmark on the device in one call within a device-time budget (SECONDS, default 560):
# check_cuda_kernels, a Qwen3-30B-A3B-shaped Q4_K_M model (48 layers, guild-mkmodel --fill pool), then
# `guild bench run` at populated contexts 512, 4096, 16384 (gen 64, 3 runs): all on the GPU (one process), with
# --gpu-mem 8G (experts in RAM on a CPU worker of 14 threads), the same with --stager pin, and, when the pack has
# a baseline build in .carry/base (bench/device/repack.sh --final BUILD BASE), all on the GPU with the baseline:
# an A/B of the decode kernels in one call.
# Pack first (bash bench/device/repack.sh --final BUILD_DIR [BASE_BUILD_DIR]), then on the device from the repo
# root:   bash bench/device/final.sh [SECONDS]
# Every step runs under `timeout -s KILL` and is skipped when it would not fit. Output: $OUT/final.log + JSON.
set -u
budget=${1:-560}
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=$PWD/.carry/bin
BASE=$PWD/.carry/base
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat .carry/COMMIT 2> /dev/null || echo unknown)
base_commit=$(cat .carry/BASE_COMMIT 2> /dev/null || echo unknown)
exec > >(tee -a "$O/final.log") 2>&1
t0=$(date +%s)
. "$(dirname "$0")/lib.sh" # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
step 40 check_cuda_kernels "$B/tests/cuda/check_cuda_kernels"
m=/tmp/q30b.gguf
step 120 "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool" \
    /usr/bin/time -f "mkmodel %e s" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
ls -l $m
run() { # LIMIT NAME BIN COMMIT FLAGS...
    lim=$1 name=$2 bin=$3 c=$4
    shift 4
    step "$lim" "bench run $name: $*" sh -c '"$0" "$@" 2>&1 | grep -v "^guild: info: \(cpu\|gpu\)-worker"' \
        "$bin/guild" bench run -m $m --populate 512,4096,16384 --gen 64 --runs 3 --batch 2048 -v --commit "$c" \
        --json "$O/qwen3-30b-a3b-q4km-$name.json" "$@"
}
if [ -f $m ]; then
    run 130 allgpu "$B" "$commit" --single-process
    run 170 gpumem8g "$B" "$commit" --gpu-mem 8G --threads 14
    [ -x "$BASE/guild" ] && run 130 allgpu-base "$BASE" "$base_commit" --single-process
    run 170 gpumem8g-pin "$B" "$commit" --gpu-mem 8G --threads 14 --stager pin
fi
say done
