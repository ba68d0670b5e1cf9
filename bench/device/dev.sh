#!/usr/bin/env bash
# Issue 6, a decode-kernel change on the device in one call within a device-time budget (SECONDS, default 300):
# the CUDA kernel and backend tests, tests/cuda/cuda_bench --quick (kernel timings), then bench/guild-cuda-prof on a Qwen3-30B-A3B-shaped model of LAYERS layers
# (default 4): every expert on the GPU at 512 and 4096 positions (traced: per-kernel times; untraced: the step's
# wall), and the experts on a CPU worker thread pool at 512.
# Pack first (bash bench/device/repack.sh --dev BUILD_DIR), then on the device from the repo root:
#   bash bench/device/dev.sh [SECONDS] [LAYERS]
# Every step runs under `timeout -s KILL` and is skipped when it would not fit. Output: $OUT/dev.log and one
# $OUT/prof-NAME.txt per profile.
set -u
budget=${1:-300}
layers=${2:-4}
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=$PWD/.carry/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
exec > >(tee -a "$O/dev.log") 2>&1
t0=$(date +%s)
. "$(dirname "$0")/lib.sh" # say, step, prof
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1);" \
    "commit $(cat .carry/COMMIT 2> /dev/null || echo unknown)"
for t in check_cuda_kernels check_cuda_attn check_cuda_expert_mma check_cuda_backend; do
    step 90 "$t" "$B/tests/cuda/$t"
done
step 120 "cuda_bench --quick" "$B/tests/cuda/cuda_bench" --quick
m=/tmp/dev-q.gguf
step 90 "model: $layers layers of Qwen3-30B-A3B, Q4_K_M recipe" \
    "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --layers "$layers" --threads "$(nproc)" -q -o $m
prof gpu --populate 512
prof gpu-untraced --populate 512 --no-trace
prof gpu-4096 --populate 4096
prof gpu-4096-untraced --populate 4096 --no-trace
prof cpu-experts --populate 512 --gpu-experts none
say done
