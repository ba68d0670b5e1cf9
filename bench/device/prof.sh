#!/usr/bin/env bash
# Issue 6, where a decode step's time goes on the device: bench/guild-cuda-prof (CUPTI) on a Qwen3-30B-A3B-shaped
# model of LAYERS layers (default 8), in one call within a device-time budget (SECONDS, default 440), at 512
# positions: every expert on the GPU with graphs; the same untraced (what tracing costs); the experts on the CPU
# (--gpu-experts none: the step waiting on the CPU side); no graphs (launch cost); then the first at 4096.
# Pack first (bash bench/device/repack.sh --prof BUILD_DIR), then on the device from the repo root:
#   bash bench/device/prof.sh [SECONDS] [LAYERS]
# Every step runs under `timeout -s KILL` and is skipped when it would not fit. Output: $OUT/prof.log and one
# $OUT/prof-NAME.txt per setup.
set -u
budget=${1:-440}
layers=${2:-8}
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=$PWD/.carry/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
exec > >(tee -a "$O/prof.log") 2>&1
echo "commit: $(cat .carry/COMMIT 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
t0=$(date +%s)
. "$(dirname "$0")/lib.sh" # say, step, prof
m=/tmp/prof-q.gguf
step 120 "model: $layers layers of Qwen3-30B-A3B, Q4_K_M recipe, --fill pool" \
    "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --layers "$layers" --fill pool --threads "$(nproc)" -q -o $m
prof gpu --populate 512
prof gpu-untraced --populate 512 --no-trace
prof cpu-experts --populate 512 --gpu-experts none
prof no-graph --populate 512 --no-cuda-graph
prof gpu-4096 --populate 4096
say done
