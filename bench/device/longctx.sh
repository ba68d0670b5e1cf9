#!/usr/bin/env bash
# Issue 18's long populated contexts on the device in one call (bench/results/longctx-h200-*.md):
# tests/cuda/check_cuda_kv_long's tensor-core prefill over the block formats (its checks against the CPU and the
# CUDA-core kernel, then its timing against that kernel and f16 at 16,384 and 65,536 positions), a
# Qwen3-30B-A3B-shaped model by guild-mkmodel, `guild plan` at --gpu-mem 8G for 65,536 and 131,072 positions in
# each KV format (where the plan puts the cache, or why it cannot), then `guild bench run --sweep` at --gpu-mem 8G:
# the contexts of each format measured along one prompt (FORMATS, each FORMAT:CONTEXTS; the longest last). Every
# step runs under `timeout -s KILL` and is skipped when it would pass the budget; the log is written to $OUT as it
# goes (the bench's lines as they come: a run killed at the budget keeps its finished contexts). CASES (default
# "mma prefill_timing") names the check_cuda_kv_long cases; empty: none. TESTS (default none) names more CUDA test
# programs run first, each PROGRAM or PROGRAM:CASE (tests/cuda/PROGRAM, CK_RUN_CASE=CASE, 40 s each). PLANS=0 skips
# the plans. GEN (default 16): tokens decoded at each context. Run from the repo root:
#   bash $C/longctx.sh [SECONDS] [FORMAT:CONTEXTS...]
# with the pack (repack.sh BUILD_DIR, then `tar -cf - -C .carry . | xz -1`) in $C/c.tar.xz (C default
# .carry-longctx).
set -u
budget=${1:-145}
shift || true
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(f16:4096,16384,32768,65536 k8v4:4096,16384,32768,65536,131072)
C=${C:-$PWD/.carry-longctx}
P=/tmp/guild-longctx
mkdir -p $P && tar -C $P -xJf "$C/c.tar.xz"
export LD_LIBRARY_PATH=$P/lib CK_DEFAULT_TIMEOUT=120
B=$P/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/longctx.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit"
for t in ${TESTS-}; do
    prog=${t%%:*} case=${t#*:}
    [ "$case" != "$t" ] || case=
    step 40 "$prog${case:+ $case}" env ${case:+CK_RUN_CASE=$case} "$B/tests/cuda/$prog"
done
for case in ${CASES-mma prefill_timing}; do
    step 40 "check_cuda_kv_long $case" env CK_RUN_CASE=$case "$B/tests/cuda/check_cuda_kv_long"
done

m=/tmp/q30b.gguf
[ -f $m ] || step 40 "model: Qwen3-30B-A3B shape, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b \
    --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || { say "no model"; exit 1; }
for ctx in $([ "${PLANS-1}" = 0 ] || echo 65536 131072); do
    for fmt in f16 q8_0 k8v4 q4_0; do
        "$B/guild" plan -m $m --backend cuda --gpu-mem 8G --batch 4096 --ctx $((ctx + 16)) --kv-type $fmt \
            > "$O/plan-$fmt-$ctx.txt" 2>&1
        echo "plan $fmt $ctx rc=$?: $(grep -m1 'KV cache' "$O/plan-$fmt-$ctx.txt" | cut -c1-300)"
    done
done
[ "${PLANS-1}" = 0 ] || say plans
for r in "${runs[@]}"; do
    fmt=${r%%:*} pop=${r#*:}
    left=$((budget - ($(date +%s) - t0)))
    [ $left -gt 20 ] || { say "skipped (no time left): $fmt $pop"; continue; }
    step $left "bench run --sweep $fmt: $pop" sh -c '"$0" "$@" 2>&1 | grep --line-buffered -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker"' \
        "$B/guild" bench run -m $m --sweep --populate "$pop" --gen "${GEN:-16}" --runs 1 --threads 14 --batch 4096 \
        --gpu-mem 8G --kv-type "$fmt" --commit "$commit" --json "$O/$fmt.json" --svg "$O/$fmt.svg"
done
say done
