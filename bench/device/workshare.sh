#!/usr/bin/env bash
# Issue 17's CPU workers of one node splitting each exchange's experts (cpu-expert-worker/experts/expert_share.h),
# in one call: a Qwen3-30B-A3B-shaped model cut to LAYERS layers (default 24: half the load time of the 48, the
# same layer) by guild-mkmodel --fill pool, then `guild bench run` decode with every expert in RAM (--backend cuda
# --gpu-experts none) at the default split of the node's CPUs for 1, 2 and 4 workers (1 x 14, 2 x 7, 4 x 3-4
# threads: node 0's last 2 CPUs left to the GPU worker), this build's and the baseline build's, medians of 3 runs
# (bench/results/workshare-h200-*.md). Run from the repo root:
#   bash bench/device/workshare.sh [SECONDS]
# with `repack.sh --final BUILD BASE_BUILD` packed as c.tar.xz in $C (default .carry-workshare). Every step runs
# under `timeout -s KILL`; output: $O/workshare.log (every run's output) and a .json per run.
set -u
budget=${1:-85}
C=${C:-$PWD/.carry-workshare}
LAYERS=${LAYERS:-24}
P=/tmp/guild-workshare
mkdir -p $P && tar -C $P -xJf "$C/c.tar.xz"
export LD_LIBRARY_PATH=$P/lib
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
exec > >(tee -a "$O/workshare.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1); $(nproc) CPUs" \
    "($(lscpu | awk -F: '/^NUMA node\(s\)/{gsub(/ /,"",$2); print $2}') NUMA node); $(free -g | awk '/Mem:/{print $2}') GiB RAM;" \
    "commit $(cat $P/COMMIT), baseline $(cat $P/BASE_COMMIT)"
m=/tmp/q30b-$LAYERS.gguf
step 25 "model: Qwen3-30B-A3B shape, $LAYERS layers, --fill pool" "$P/bin/tools/guild-mkmodel" --shape qwen3-30b-a3b \
    --layers "$LAYERS" --fill pool --threads "$(nproc)" -q -o $m
bench() { # NAME BUILD(bin|base) FLAGS...
    name=$1 b=$2
    shift 2
    step 18 "bench $name ($b): $*" sh -c '"$0" "$@" > "'"/tmp/$name.log"'" 2>&1; st=$?;
        grep -E "context|split|stores|cpus|warn|error|memory:" "'"/tmp/$name.log"'"; exit $st' \
        "$P/$b/guild" bench run -m $m --backend cuda --gpu-experts none --populate 64 --gen 48 --runs 3 \
        --dram-gbs 100 --json "$O/$name.json" -v "$@"
}
# the reference and this build's splits first, then the baseline's, should the budget run out
bench w1 bin --cpu-workers 1
bench w2 bin --cpu-workers 2
bench w4 bin --cpu-workers 4
bench base-w2 base --cpu-workers 2
bench base-w4 base --cpu-workers 4
bench base-w1 base --cpu-workers 1
say "done"
