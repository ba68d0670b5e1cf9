#!/usr/bin/env bash
# Issue 15's device session (the hybrids: the gated delta net's chunked prefill, the cache of the attention layers
# only) in one call within a device-time budget. Run from the repo root with the pack in $C (default .carry-gdn:
# pack.tar.xz of repack.sh's .carry, bin/ and lib/, with COMMIT):
#   bash bench/device/gdn.sh [SECONDS] [LAYERS]
# check_cuda_gdn_host, cuda_bench --gdn (the one-row form against the chunked form at Qwen3-Next's heads),
# check_cuda_backend's reruns case (the hybrids' chunked prefill against the CPU backend and in parts), a
# Qwen3-Next-80B-A3B-shaped model of LAYERS layers (default 24: the 48-layer file does not fit /tmp beside the
# rest) by guild-mkmodel --fill pool, guild bench run at 512/4096/16384 with --gpu-mem 8G and all on the GPU,
# then check_cuda_backend's greedy case (every architecture against the CPU backend). Every step runs under
# `timeout -s KILL` and is skipped when it would not fit. Output: $OUT/gdn.log, plans and JSON.
set -u
budget=${1:-210}
layers=${2:-24}
C=${C:-$PWD/.carry-gdn}
if [ -f "$C/pack.tar.xz" ]; then
    mkdir -p /tmp/gdn-pack && tar -C /tmp/gdn-pack -xJf "$C/pack.tar.xz" && C=/tmp/gdn-pack
fi
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/gdn.log") 2>&1
t0=$(date +%s)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; /tmp: $(df -h /tmp | tail -1)"

step 20 check_cuda_gdn_host "$B/tests/cuda/check_cuda_gdn_host"
step 20 "cuda_bench --gdn" "$B/tests/cuda/cuda_bench" --gdn
step 45 "check_cuda_backend reruns" env CK_RUN_CASE=reruns CK_VERBOSITY=verbose "$B/tests/cuda/check_cuda_backend"

m=/tmp/q80b-${layers}l.gguf
step 45 "model: Qwen3-Next-80B-A3B shape, $layers layers, --fill pool" "$B/tools/guild-mkmodel" \
    --shape qwen3-next-80b-a3b --layers "$layers" --fill pool --threads "$(nproc)" -q -o $m
if [ -f $m ]; then
    ls -l $m
    for mode in 8g gpu; do
        flags=()
        [ $mode = 8g ] && flags=(--gpu-mem 8G)
        step 20 "guild plan $mode" sh -c '"$0" "$@" > "'"$O"'/plan-'"$mode"'.txt" 2>&1; st=$?; cat "'"$O"'/plan-'"$mode"'.txt"; exit $st' \
            "$B/guild" plan -m $m --backend cuda --batch 4096 --ctx 16448 "${flags[@]}"
        step 60 "bench run $mode" sh -c '"$0" "$@" 2>&1 | grep -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker"' \
            "$B/guild" bench run -m $m --populate 512,4096,16384 --gen 32 --runs 1 --threads 14 --batch 4096 -v \
            --commit "$commit" --json "$O/q80b-$mode.json" "${flags[@]}"
    done
    rm -f $m
fi
step 40 "check_cuda_backend greedy" env CK_RUN_CASE=greedy "$B/tests/cuda/check_cuda_backend"
say done
