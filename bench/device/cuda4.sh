#!/usr/bin/env bash
# Issue 6, tensor-core step on the device machine, in one call within a device-time budget (SECONDS, default 200):
# the bit tests of the int8 mma expert and dense kernels and of the tensor-core prefill attention, the backend
# and greedy tests (incl. --stager pin = pageable bits), then prefill/decode A/B on a 4-layer Qwen3-30B-A3B-shaped
# model: no staging, split through guild-stager, split with --stager pin, every expert resident.
# Pack first (bash bench/device/repack.sh BUILD_DIR), then on the device from the repo root:
#   bash bench/device/cuda4.sh [SECONDS] [CONTEXTS]
# Every step runs under `timeout -s KILL` and is skipped when it would not fit. Output: $OUT/cuda4.log + JSON.
set -u
budget=${1:-200}
ctx=${2:-4096}
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=$PWD/.carry/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat .carry/COMMIT 2>/dev/null || echo unknown)
exec > >(tee -a "$O/cuda4.log") 2>&1
t0=$(date +%s)
. "$(dirname "$0")/lib.sh" # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit"
for t in check_cuda_expert_mma check_cuda_attn check_cuda_kernels check_cuda_backend; do
    [ -x "$B/tests/cuda/$t" ] && step 90 "$t" "$B/tests/cuda/$t"
done
GUILD_BUILDDIR=$B step 60 "mkmodel_greedy.sh" sh tests/cuda/mkmodel_greedy.sh
m=/tmp/q4l.gguf
step 40 "model: 4 layers of Qwen3-30B-A3B, Q4_K_M recipe, --fill pool" \
    "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --layers 4 --fill pool --threads "$(nproc)" -q -o $m
ab() { # NAME FLAGS...
    name=$1
    shift
    step 40 "bench run $name: $*" "$B/guild" bench run -m $m --populate "$ctx" --gen 16 --runs 3 --batch 2048 \
        --threads 14 --commit "$commit" --json "$O/cuda4-$name.json" -v "$@"
}
if [ -f $m ]; then
    ab nostaging --gpu-mem 3G --gpu-experts none
    ab process --gpu-mem 2.3G --stager process
    ab pin --gpu-mem 2.3G --stager pin
    ab allgpu
fi
say done
