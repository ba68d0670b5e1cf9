#!/usr/bin/env bash
# Where the per-layer CPU/GPU split of streamed experts loses time, in one device call: prefill 4096 of a
# 4-layer Qwen3-30B-A3B-shaped model under several plans, A/B in one run (medians of 3 after warm-up).
# Pack first (bench/device/pack.sh), then on the device from the repo root: bash bench/device/split-ab.sh
# Output: $OUT/split-ab.log and one JSON per configuration.
set -u
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=$PWD/.carry/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat .carry/COMMIT 2>/dev/null || echo unknown)
exec > >(tee -a "$O/split-ab.log") 2>&1
m=/tmp/q4l.gguf
[ -f $m ] || "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --layers 4 --threads "$(nproc)" -q -o $m
ab() { # NAME FLAGS...
    name=$1
    shift
    echo "== $name: $*"
    timeout 60 "$B/guild" bench run -m $m --populate 4096 --gen 8 --runs 3 --batch 2048 --commit "$commit" \
        --json "$O/split-$name.json" "$@" 2>&1 | grep -E "context +4096 run|split of|^ +4096|cuda moe: (device|staged|CPU)"
}
ab nostage14 --gpu-mem 3G --gpu-experts none --threads 14
ab nostage8 --gpu-mem 3G --gpu-experts none --threads 8
ab auto14 --gpu-mem 2.3G --stager process --threads 14 -v
ab auto8 --gpu-mem 2.3G --stager process --stager-threads 6 --threads 8 -v
ab force1 --gpu-mem 2.3G --stager process --force-split 1 --threads 14 -v
ab force03 --gpu-mem 2.3G --stager process --force-split 0.3 --threads 14 -v
ab allgpu --threads 14
