#!/usr/bin/env bash
# Issue 17's CPU workers sharing one node, in one call: a Qwen3-30B-A3B-shaped model by guild-mkmodel --fill
# pool, then `guild bench run` decode with every expert in RAM (--backend cuda --gpu-experts none) for one
# worker at --threads 14 (the reference), 2 and 4 workers and one at the default split of the node's CPUs, 2
# workers on the node cut in two by --cpu-nodes (the topology of a machine of two nodes faked on this one), and
# the baseline build's, medians of 3 runs each (bench/results/workers-h200-*.md). `guild plan` prints the split
# first. Run from the repo root:
#   bash bench/device/workers.sh [SECONDS]
# with `repack.sh --final BUILD BASE_BUILD` packed as c.tar.xz in $C (default .carry-workers). Every step runs
# under `timeout -s KILL`; output: $O/workers.log (every run's output) and a .json per run (the device tool
# returns 8 files).
set -u
budget=${1:-110}
C=${C:-$PWD/.carry-workers}
P=/tmp/guild-workers
mkdir -p $P && tar -C $P -xJf "$C/c.tar.xz"
export LD_LIBRARY_PATH=$P/lib
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
exec > >(tee -a "$O/workers.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1); $(nproc) CPUs" \
    "($(lscpu | awk -F: '/^Thread\(s\) per core/{gsub(/ /,"",$2); print $2}') threads a core," \
    "$(lscpu | awk -F: '/^NUMA node\(s\)/{gsub(/ /,"",$2); print $2}') NUMA node); $(free -g | awk '/Mem:/{print $2}') GiB RAM;" \
    "commit $(cat $P/COMMIT), baseline $(cat $P/BASE_COMMIT)"
m=/tmp/q30b.gguf
step 40 "model: Qwen3-30B-A3B shape, --fill pool" "$P/bin/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
step 5 "guild plan --cpu-workers 4" "$P/bin/guild" plan -m $m --cpu-workers 4 --backend cuda --gpu-experts none
bench() { # NAME BUILD(bin|base) FLAGS...
    name=$1 b=$2
    shift 2
    step 20 "bench $name ($b): $*" sh -c '"$0" "$@" > "'"/tmp/$name.log"'" 2>&1; st=$?;
        cat "'"/tmp/$name.log"'"; exit $st' \
        "$P/$b/guild" bench run -m $m --backend cuda --gpu-experts none --populate 64 --gen 64 --runs 3 \
        --dram-gbs 100 --json "$O/$name.json" "$@"
}
# the most telling first, should the budget run out: the reference, the default splits (node 0's last 2 CPUs left
# to the GPU worker), the baseline's default (every CPU pinned), then the topology fake (two nodes of 7 CPUs)
bench w1-t14 bin --cpu-workers 1 --threads 14
bench w2 bin --cpu-workers 2
bench w4 bin --cpu-workers 4
bench base-w2 base --cpu-workers 2
bench w1 bin --cpu-workers 1
bench w2-fake2 bin --cpu-workers 2 --cpu-nodes 0-6/7-13
bench base-w1-t14 base --cpu-workers 1 --threads 14
say "done"
