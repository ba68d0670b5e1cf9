#!/usr/bin/env bash
# Issue 6, correctness of the CUDA kernels on the device machine, in one call within a device-time budget
# (SECONDS, default 450): the CUDA kernel and backend tests as built, then compute-sanitizer (memcheck, and
# racecheck on the shared-memory tensor-core kernels) over their bit/accuracy cases (the timing cases only time,
# and take too long under the sanitizer). Pack first (bash bench/device/repack.sh BUILD_DIR), then on the device
# from the repo root:   bash bench/device/sanitize.sh [SECONDS]
# Every step runs under `timeout -s KILL` and is skipped when it would not fit. Output: $OUT/sanitize.log.
set -u
budget=${1:-450}
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=$PWD/.carry/bin/tests/cuda
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
exec > >(tee -a "$O/sanitize.log") 2>&1
t0=$(date +%s)
. "$(dirname "$0")/lib.sh" # say, step
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2> /dev/null | head -1)
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1);" \
    "commit $(cat .carry/COMMIT 2> /dev/null || echo unknown); sanitizer: ${san:-none}"
for t in check_cuda_expert_mma check_cuda_attn check_cuda_kernels check_cuda_backend; do
    step 90 "$t" "$B/$t"
done
[ -n "$san" ] || { say "no compute-sanitizer"; exit 0; }
# tool, program, case: the bit/accuracy cases of the three tensor-core kernels first
for run in "memcheck check_cuda_expert_mma bits" "memcheck check_cuda_expert_mma dense bits" \
    "memcheck check_cuda_attn accuracy" "memcheck check_cuda_attn dispatch" \
    "racecheck check_cuda_expert_mma bits" "racecheck check_cuda_attn accuracy" \
    "memcheck check_cuda_kernels matmul" "memcheck check_cuda_kernels attention" \
    "memcheck check_cuda_kernels router"; do
    set -- $run
    tool=$1 prog=$2
    shift 2
    CK_RUN_CASE="$*" step 100 "$tool $prog [$*]" "$san" --tool "$tool" --error-exitcode 9 --print-limit 20 \
        "$B/$prog"
done
say done
