#!/usr/bin/env bash
# Issue 18's long populated contexts on the device in one call (bench/results/longctx-h200-*.md): the split
# block-format attention's bit and accuracy checks with its decode timings to 131,072 positions in GPU and mapped
# host memory (tests/cuda/check_cuda_kv_long), a Qwen3-30B-A3B-shaped model by guild-mkmodel, `guild plan` at
# --gpu-mem 8G for 65,536 and 131,072 positions in each KV format (where the plan puts the cache, or why it
# cannot), then `guild bench run` at --gpu-mem 8G: f16, k8v4 and q8_0 at 4,096 and 16,384 positions, then f16 at
# 65,536 (the riskiest and longest last, in its own run). Run from the repo root:
#   bash $C/longctx.sh [SECONDS]
# with the pack (repack.sh BUILD_DIR, then `tar -cJf carry.tar.xz .carry`) in $C/carry.tar.xz (default
# .carry-longctx). Every step runs under `timeout -s KILL` and is skipped when it would pass the budget.
set -u
budget=${1:-220}
C=${C:-$PWD/.carry-longctx}
P=/tmp/guild-longctx/.carry
mkdir -p /tmp/guild-longctx && tar -C /tmp/guild-longctx -xJf "$C/carry.tar.xz"
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
step 40 check_cuda_kv_long sh -c '"$0" > "'"$O"'/check_cuda_kv_long.log" 2>&1; st=$?; grep -v "^kv " "'"$O"'/check_cuda_kv_long.log" | tail -30; exit $st' "$B/tests/cuda/check_cuda_kv_long"

m=/tmp/q30b.gguf
[ -f $m ] || step 60 "model: Qwen3-30B-A3B shape, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b \
    --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || { say "no model"; exit 1; }
for ctx in 65536 131072; do
    for fmt in f16 q8_0 k8v4 q4_0; do
        "$B/guild" plan -m $m --backend cuda --gpu-mem 8G --ctx $((ctx + 16)) --kv-type $fmt > "$O/plan-$fmt-$ctx.txt" 2>&1
        echo "plan $fmt $ctx rc=$?: $(grep -m1 'KV cache:\|does not fit' "$O/plan-$fmt-$ctx.txt" | cut -c1-400)"
    done
done
bench() { # LIMIT NAME POPULATE FLAGS...
    lim=$1 name=$2 pop=$3
    shift 3
    step "$lim" "bench run $name: $pop $*" sh -c '"$0" "$@" 2>&1 | grep -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker"' \
        "$B/guild" bench run -m $m --populate "$pop" --gen 16 --runs 1 --threads 14 --batch 4096 --gpu-mem 8G \
        --commit "$commit" --json "$O/$name.json" "$@"
}
bench 40 f16 4096,16384 --kv-type f16
bench 55 k8v4 4096,16384 --kv-type k8v4
bench 55 q8_0 4096,16384 --kv-type q8_0
bench 70 f16-65536 65536 --kv-type f16
say done
