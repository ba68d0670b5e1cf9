#!/usr/bin/env bash
# Issue 16's device session in one call within a device-time budget: the CUDA checks of the routers and of the
# routed expert products of every type, then the two large shapes of the issue at --gpu-mem 24G, cut to what the
# device's /tmp holds (a file of ~30 GB at a time): DeepSeek-V3 (deepseek2: 3 dense layers, then MoE layers of 256
# experts of 2048, MLA) and GPT-OSS-120B (36 -> fewer layers of 128 MXFP4 experts of 2880). guild bench run:
# prefill and decode at populated contexts 512, 4096, 16384, medians of RUNS, fractions of the measured limits.
# Run from the repo root with the pack in $C (default .carry: bin/, lib/, COMMIT):
#   bash bench/device/archs.sh [SECONDS] [DS_LAYERS] [OSS_LAYERS] [RUNS]
# Every step runs under `timeout -s KILL` and is skipped when it would not fit. Output: $OUT/*.log and JSON.
set -u
budget=${1:-420}
ds_layers=${2:-8}
oss_layers=${3:-18}
runs=${4:-2}
C=${C:-$PWD/.carry}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/archs.log") 2>&1
t0=$(date +%s)
. "$(dirname "$0")/lib.sh" # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; /tmp: $(df -h /tmp | tail -1)"

export CK_DEFAULT_TIMEOUT=300
step 40 "check_cuda_kernels router" env CK_RUN_CASE=router "$B/tests/cuda/check_cuda_kernels"
step 90 "check_cuda_expert_mma bits" env CK_RUN_CASE=bits "$B/tests/cuda/check_cuda_expert_mma"

bench() { # LIMIT NAME MODEL FLAGS...
    lim=$1 name=$2 mdl=$3
    shift 3
    step "$lim" "bench run $name: $*" sh -c '"$0" "$@" 2>&1 | grep -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker"' \
        "$B/guild" bench run -m "$mdl" --populate 512,4096,16384 --gen 32 --runs "$runs" --threads 14 --batch 4096 -v \
        --commit "$commit" --json "$O/$name.json" "$@"
}
plan() { # NAME MODEL FLAGS...
    name=$1 mdl=$2
    shift 2
    step 30 "guild plan $name: $*" sh -c '"$0" "$@" > "'"$O"'/plan-'"$name"'.txt" 2>&1; st=$?; cat "'"$O"'/plan-'"$name"'.txt"; exit $st' \
        "$B/guild" plan -m "$mdl" --backend cuda --batch 4096 --ctx 16448 "$@"
}

mds=/tmp/deepseek-v3-cut.gguf
step 120 "model: DeepSeek-V3 shape, $ds_layers layers, --fill pool" "$B/tools/guild-mkmodel" --shape deepseek-v3 \
    --layers "$ds_layers" --fill pool --threads "$(nproc)" -q -o $mds
if [ -f $mds ]; then
    say "deepseek-v3 cut: $(du -h $mds | cut -f1)"
    plan ds-24g $mds --gpu-mem 24G
    bench 200 ds-24g $mds --gpu-mem 24G
    rm -f $mds
fi
# a killed run's workers exit on their parent's death (SIGTERM): wait for them, or the removed file's blocks stay
for i in $(seq 1 30); do pgrep -f 'guild-(gpu|cpu)-worker' > /dev/null || break; sleep 1; done
say "processes left: $(pgrep -fa 'guild' | head -5 | tr '\n' ';'); /tmp: $(df -h /tmp | tail -1)"
moss=/tmp/gpt-oss-120b-cut.gguf
step 90 "model: GPT-OSS-120B shape, $oss_layers layers, --fill pool" "$B/tools/guild-mkmodel" --shape gpt-oss-120b \
    --layers "$oss_layers" --fill pool --threads "$(nproc)" -q -o $moss
if [ -f $moss ]; then
    say "gpt-oss-120b cut: $(du -h $moss | cut -f1)"
    plan oss-24g $moss --gpu-mem 24G
    bench 160 oss-24g $moss --gpu-mem 24G
    rm -f $moss
fi
say done
