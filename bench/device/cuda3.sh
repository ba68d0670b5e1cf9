#!/usr/bin/env bash
# Issue 6, part 3 on the device machine, in one call within a small device-time budget: the per-layer CPU/GPU
# split of streamed layers' experts and the guild-stager's pinned rings. Pack first
# (`bash bench/device/pack.sh BUILD_DIR`, carried as .carry), then on the device, from the repo root:
#   bash bench/device/cuda3.sh [SECONDS]
# Steps in order of importance, each skipped when the SECONDS (default 220) left would not cover its limit:
# check_cuda_backend (split bridge bits, forced-split greedy, streaming), tests/cuda/mkmodel_greedy.sh (stager
# process vs pageable copies: same logits), check_cuda_kernels, the copy rates to the device (file mapping
# pageable, through the ring, pinned ceiling) on a 4-layer Qwen3-30B-A3B-shaped model, `guild bench run`
# prefill with the experts streamed (--stager none vs process), compute-sanitizer memcheck on the split tests.
# Everything goes to $OUT/cuda3.log.
set -u
budget=${1:-220}
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=$PWD/.carry/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat .carry/COMMIT 2>/dev/null || echo unknown)
exec > >(tee -a "$O/cuda3.log") 2>&1
t0=$(date +%s)
. "$(dirname "$0")/lib.sh" # say, step

say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit"
step 60 "check_cuda_backend" "$B/tests/cuda/check_cuda_backend"
GUILD_BUILDDIR=$B step 50 "mkmodel_greedy.sh" sh tests/cuda/mkmodel_greedy.sh
step 20 "check_cuda_kernels" "$B/tests/cuda/check_cuda_kernels"
step 40 "model: 4 layers of Qwen3-30B-A3B, Q4_K_M recipe" \
    "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --layers 4 --threads "$(nproc)" -q -o /tmp/q4l.gguf
if [ -f /tmp/q4l.gguf ]; then
    step 25 "copy rates to the device: pageable mapping, ring, pinned" \
        "$B/bench/guild-stage-cuda-bench" -m /tmp/q4l.gguf --threads 8 --runs 3
    # A/B in one call: no staging in the plan (every expert on the CPU worker) against the split with each
    # stager; 2.3G leaves no layer resident but two staging buffers (3G with --gpu-experts none plans none)
    step 30 "bench run: prefill 4096, no staging (experts on the CPU worker)" \
        "$B/guild" bench run -m /tmp/q4l.gguf --populate 4096 --gen 8 --runs 3 --batch 2048 \
        --gpu-mem 3G --gpu-experts none --threads $(($(nproc) - 2)) --commit "$commit" \
        --json "$O/q4l-nostaging.json"
    for st in none process; do
        step 30 "bench run: prefill 4096, experts streamed and split, --stager $st" \
            "$B/guild" bench run -m /tmp/q4l.gguf --populate 4096 --gen 8 --runs 3 --batch 2048 \
            --gpu-mem 2.3G --threads $(($(nproc) - 2)) --stager "$st" -v --commit "$commit" \
            --json "$O/q4l-stream-$st.json"
    done
fi
if command -v compute-sanitizer > /dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    CK_RUN_CASE=graphs_experts_arena step 60 "compute-sanitizer memcheck: check_cuda_backend graphs_experts_arena" \
        "$cs" --tool memcheck --error-exitcode 9 "$B/tests/cuda/check_cuda_backend"
else
    say "no compute-sanitizer on this machine"
fi
say done
