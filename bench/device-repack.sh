#!/usr/bin/env bash
# Packs the binaries the device runs of issue 6 use (guild, the workers, the stager, the model writer, the CUDA
# test and bench programs, the CPU kernel checks) from BUILD_DIR into .carry, stripped, under the 64 MiB a call
# carries; .carry/COMMIT names the build's commit. Usage: bash bench/device-repack.sh BUILD_DIR [COMMIT-NOTE]
set -euo pipefail
build=${1:?usage: device-repack.sh BUILD_DIR [NOTE]}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$top/bench/device-pack.sh" "$build" > /dev/null
keep='^\./(guild|guild-cpu-worker|guild-gpu-worker|guild-stager|tools/guild-mkmodel|tests/cuda/check_cuda_[a-z_]+|tests/cuda/cuda_bench|stager/guild-stager-cuda-bench|tests/check_kernels|tests/check_amx|bench/guild-cuda-prof)$'
(cd "$top/.carry/bin" && find . -type f | grep -vE "$keep" | xargs -r rm -f && find . -type f | xargs strip 2> /dev/null || true)
echo "$(git -C "$build/.." rev-parse --short=12 HEAD 2> /dev/null || echo unknown)${2:+ $2}" > "$top/.carry/COMMIT"
du -sh "$top/.carry"
