#!/usr/bin/env bash
# The CUDA backend's part 2 on the device machine (issue 6): in-graph doorbells, graphs, the GPU memory plan,
# device experts and streaming, and `guild bench run`. Pack first (`bash bench/device/pack.sh BUILD_DIR`, which
# the run carries as .carry), then on the device, from the repo root:
#   bash bench/device/cuda2.sh dev     the new backend tests, a mid-size (8-layer) Qwen3-30B-A3B-shaped model
#                                      through `guild bench run` (multi-process, a budget with streaming), and
#                                      tests/cuda/mkmodel_greedy.sh
#   bash bench/device/cuda2.sh final   the benchmark of issue 6: a Qwen3-30B-A3B-shaped Q4_K_M model written
#                                      by guild-mkmodel --fill pool on local disk, `guild bench run` at populated
#                                      contexts 512, 4096, 16384 (gen 64, 3 runs) with --gpu-mem 8G (experts in
#                                      RAM on a CPU worker) and without a budget (all on the GPU)
# Everything goes to $OUT (one log and the JSON files); the commit comes from .carry/COMMIT.
set -u
mode=${1:?usage: cuda2.sh dev|final}
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=$PWD/.carry/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat .carry/COMMIT 2>/dev/null || echo unknown)
threads=$(($(nproc) - 2)) # the CPU worker's; the GPU worker's host thread and the coordinator keep two
exec > >(tee -a "$O/$mode.log") 2>&1
say() { echo "== $(date -u +%T) $*"; }

say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit"

case $mode in
dev)
    say "check_cuda_backend: graphs, device experts, budget, arena from the device, streaming"
    CK_RUN_CASE=graphs_experts_arena timeout 240 "$B/tests/cuda/check_cuda_backend"
    echo "rc=$?"
    say "mid-size model (8 layers of Qwen3-30B-A3B)"
    timeout 120 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --layers 8 --threads "$(nproc)" -q -o /tmp/q8.gguf
    echo "rc=$?"
    say "bench: multi-process, --gpu-mem 2.5G (staging buffers, experts streamed for large batches)"
    timeout 180 "$B/guild" bench run -m /tmp/q8.gguf --populate 512,4096 --gen 16 --runs 1 --batch 2048 \
        --gpu-mem 2.5G --threads "$threads" -v --commit "$commit" --json "$O/q8-gpumem2.5g.json" 2>&1 |
        grep -v "^guild: info: \(cpu\|gpu\)-worker"
    echo "rc=$?"
    say "mkmodel_greedy.sh"
    GUILD_BUILDDIR=$B timeout 240 sh tests/cuda/mkmodel_greedy.sh
    echo "rc=$?"
    ;;
final)
    # one call of at most 600 s: the model (--fill pool: disk-bound; exact took ~270 s with 16 threads), all on
    # the GPU, then the budget run with what is left (each run's lines are in the log as they come; the JSON is
    # written at the end of a bench run)
    t0=$(date +%s)
    say "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool"
    /usr/bin/time -f "mkmodel %e s" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" \
        -q -o /tmp/q30b.gguf
    ls -l /tmp/q30b.gguf
    say "bench: no budget, all on the GPU"
    timeout 170 "$B/guild" bench run -m /tmp/q30b.gguf --populate 512,4096,16384 --gen 64 --runs 3 --batch 2048 \
        --single-process -v --commit "$commit" --json "$O/qwen3-30b-a3b-q4km-allgpu.json"
    echo "rc=$?"
    left=$((575 - ($(date +%s) - t0)))
    say "bench: --gpu-mem 8G, experts in RAM on a CPU worker ($left s left)"
    timeout "$left" "$B/guild" bench run -m /tmp/q30b.gguf --populate 512,4096,16384 --gen 64 --runs 3 \
        --batch 2048 --gpu-mem 8G --threads "$threads" -v --commit "$commit" \
        --json "$O/qwen3-30b-a3b-q4km-gpumem8g.json" 2>&1 | grep -v "^guild: info: \(cpu\|gpu\)-worker"
    echo "rc=$?"
    ;;
esac
say done
