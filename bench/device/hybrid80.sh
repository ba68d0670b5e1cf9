#!/usr/bin/env bash
# Issue 15's full-size measurement and the hybrids' speculative rollback on CUDA, in one call within a device-time
# budget. Run from the repo root with the pack in $C (default .carry-next80: c.tar.xz of repack.sh's .carry, bin/
# and lib/, with COMMIT):
#   bash bench/device/hybrid80.sh [SECONDS] [LAYERS] [MODES]
# check_cuda_backend's reruns case (the hybrids' chunked prefill against the CPU backend); the Qwen3-Next-80B-A3B
# shape with all LAYERS layers (default 48, ~48 GB: the file alone on /tmp) by guild-mkmodel --fill pool, timed;
# guild plan and guild bench run at 512/4096/16384 with --gpu-mem 8G (experts in RAM, streamed for large batches)
# and all on the GPU (MODES, default "8g gpu"; a bench gets at most what is left of the budget); then tests/cuda/spec_cuda.sh hybrids (--spec ngram, draft and mtp on the CUDA backend give
# --spec none's bits, the hybrids' recurrent state rolled back). Every step runs under `timeout -s KILL` and is
# skipped when it would not fit. Output: $OUT/hybrid80.log, plans and JSON.
set -u
budget=${1:-235}
layers=${2:-48}
modes=${3:-8g gpu}
C=${C:-$PWD/.carry-next80}
if [ -f "$C/c.tar.xz" ]; then
    mkdir -p /tmp/c && tar -C /tmp/c -xJf "$C/c.tar.xz" && C=/tmp/c
fi
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/hybrid80.log") 2>&1
t0=$(date +%s)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; /tmp: $(df -h /tmp | tail -1)"

step 20 "check_cuda_backend reruns" env CK_RUN_CASE=reruns "$B/tests/cuda/check_cuda_backend"

m=/tmp/q80b-${layers}l.gguf
s0=$(date +%s)
step 70 "model: Qwen3-Next-80B-A3B shape, $layers layers, --fill pool" "$B/tools/guild-mkmodel" \
    --shape qwen3-next-80b-a3b --layers "$layers" --fill pool --threads "$(nproc)" -q -o $m
say "the model took $(($(date +%s) - s0)) s to write"
if [ -f $m ]; then
    ls -l $m
    df -h /tmp | tail -1
    for mode in $modes; do
        flags=()
        blim=70 # (not `lim`: lib.sh's step sets that)
        [ $mode = 8g ] && flags=(--gpu-mem 8G) && blim=100
        left=$((budget - $(date +%s) + t0 - 16)) # the plan's step (15 s) first
        [ $blim -gt $left ] && blim=$left
        step 15 "guild plan $mode" sh -c '"$0" "$@" > "'"$O"'/plan-'"$mode"'.txt" 2>&1; st=$?; cat "'"$O"'/plan-'"$mode"'.txt"; exit $st' \
            "$B/guild" plan -m $m --backend cuda --batch 4096 --ctx 16448 "${flags[@]}"
        step $blim "bench run $mode" sh -c '"$0" "$@" 2>&1 | grep --line-buffered -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker"' \
            "$B/guild" bench run -m $m --populate 512,4096,16384 --gen 32 --runs 1 --threads 14 --batch 4096 -v \
            --commit "$commit" --json "$O/q80b-$mode.json" "${flags[@]}"
    done
    rm -f $m
fi
step 50 "spec_cuda.sh hybrids" env GUILD_BUILDDIR="$B" sh tests/cuda/spec_cuda.sh hybrids
say done
