#!/usr/bin/env bash
# Packs the binaries the device runs of issue 6 use (guild, the workers, the stager, the model writer, the CUDA
# test and bench programs, the CPU kernel checks) from BUILD_DIR into .carry, stripped, under the 64 MiB a call
# carries; .carry/COMMIT names the build's commit. With --prof, only the CUPTI profiler (bench/guild-cuda-prof)
# and the model writer: the profiler and libcupti (12 MB more) do not fit beside the others. With --dev, the
# profiler, the model writer and the CUDA kernel/backend tests: a kernel change's checks and timings in one call.
# With --final, what bench/device/final.sh runs, and the guild and workers of BASE_BUILD_DIR in .carry/base.
# Only the libraries the kept binaries load stay.
# Usage: bash bench/device/repack.sh [--prof|--dev] BUILD_DIR [COMMIT-NOTE]
#        bash bench/device/repack.sh --final BUILD_DIR [BASE_BUILD_DIR]
set -euo pipefail
keep='^\./(guild|guild-cpu-worker|guild-gpu-worker|guild-stager|tools/guild-mkmodel|tests/cuda/check_cuda_[a-z_]+|tests/cuda/cuda_bench|bench/guild-stage-cuda-bench|tests/check_kernels|tests/check_amx|tests/mk_mtp_oracle)$'
if [ "${1:-}" = --prof ]; then
    keep='^\./(bench/guild-cuda-prof|tools/guild-mkmodel)$'
    shift
elif [ "${1:-}" = --final ]; then # the real-size benchmark (bench/device/final.sh), with a baseline build
    keep='^\./(guild|guild-cpu-worker|guild-gpu-worker|guild-stager|tools/guild-mkmodel|tests/cuda/check_cuda_kernels)$'
    final=1
    shift
elif [ "${1:-}" = --dev ]; then # kernel work: the profiler beside the CUDA kernel and backend tests
    keep='^\./(bench/guild-cuda-prof|tools/guild-mkmodel|tests/cuda/check_cuda_(kernels|attn|backend|expert_mma)|tests/cuda/cuda_bench)$'
    shift
fi
build=${1:?usage: repack.sh [--prof|--dev] BUILD_DIR [NOTE] | --final BUILD_DIR [BASE_BUILD_DIR]}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bash "$top/bench/device/pack.sh" "$build" > /dev/null
(cd "$top/.carry/bin" && find . -type f | grep -vE "$keep" | xargs -r rm -f && find . -type f | xargs strip 2> /dev/null || true)
if [ -z "$(find "$top/.carry/bin" -type f)" ]; then
    echo "device-repack: nothing of $keep in $build" >&2
    exit 1
fi
# the shared libraries no kept binary loads (pack.sh copied those of every program of the build)
need=$( (cd "$top/.carry/bin" && find . -type f -print0 | LD_LIBRARY_PATH="$top/.carry/lib" xargs -0 ldd 2> /dev/null ||
        true) | awk '/=> \//{print $1}' | sort -u)
for f in "$top/.carry/lib"/*; do
    grep -qxF "$(basename "$f")" <<< "$need" || rm -f "$f"
done
rev() { git -C "$1/.." rev-parse --short=12 HEAD 2> /dev/null || echo unknown; }
if [ -n "${final:-}" ]; then
    echo "$(rev "$build")" > "$top/.carry/COMMIT"
    rm -rf "$top/.carry/base" "$top/.carry/BASE_COMMIT"
    if [ -n "${2:-}" ]; then # the baseline's guild and workers (the coordinator starts the workers beside it)
        mkdir -p "$top/.carry/base"
        for p in guild guild-cpu-worker guild-gpu-worker guild-stager; do
            cp "$2/$p" "$top/.carry/base/$p" && strip "$top/.carry/base/$p"
        done
        echo "$(rev "$2")" > "$top/.carry/BASE_COMMIT"
    fi
else
    echo "$(rev "$build")${2:+ $2}" > "$top/.carry/COMMIT"
fi
du -sh "$top/.carry"
