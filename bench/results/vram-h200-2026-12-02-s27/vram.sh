#!/usr/bin/env bash
# vram (issue 14, session 27): the GPU worker's device memory against its plan, the new build (a trace of the
# device's in-use by allocation phase, at the first prefill batch, the first graph step and as graphs accumulate;
# the plan counting the context and the driver's share) and main's (72d583c) in the same call. Each run is watched
# by nvidia-smi every 100 ms (the peak of the device's memory.used, whatever build). Two configurations that showed
# the overshoot: `guild bench sessions` of a Qwen3-30B-A3B shape at --gpu-mem 8G (16 sessions: the KV cache in
# host RAM with a layer's staging), and `guild bench run` of a DeepSeek-V3 shape cut to 4 layers (3 dense, 1 MoE
# of 256 experts, MLA) at --gpu-mem 16G (streamed through staging slots from the CPU worker's registered copies).
# Run from the repo root: bash .carry-vram/vram.sh [BUDGET_S]. Output: $OUT/run.log, smi-*.txt, *.json
set -u
t0=$(date +%s)
budget=${1:-88}
C=$PWD/.carry-vram
P=/tmp/c-vram
rm -rf $P; mkdir -p $P && tar -xJf "$C/c.tar.xz" -C $P
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee -a "$O/run.log") 2>&1
. bench/device/lib.sh
commit=$(cat $P/COMMIT) base_commit=$(cat $P/BASE_COMMIT)
say "device: $(nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit, baseline $base_commit"
m=/tmp/q30b-vram.gguf
d=/tmp/ds4-vram.gguf
(timeout -s KILL 40 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 8 -q -o $m > "$O/mk.txt" 2>&1
    echo "rc=$? (q30b)" >> "$O/mk.txt"
    timeout -s KILL 40 "$B/tools/guild-mkmodel" --shape deepseek-v3 --layers 4 --fill pool --threads 8 -q -o $d >> "$O/mk.txt" 2>&1
    echo "rc=$? (ds4)" >> "$O/mk.txt"; touch /tmp/ds4-vram.done) &
watch() { # LIMIT TAG CMD...: the step with nvidia-smi sampling the device's memory.used every 100 ms
    lim=$1 tag=$2
    shift 2
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$O/smi-$tag.txt" 2> /dev/null &
    s=$!
    step "$lim" "$tag" "$@"
    kill $s 2> /dev/null
    wait $s 2> /dev/null
    say "peak device memory.used ($tag): $(sort -n "$O/smi-$tag.txt" | tail -1) MiB (nvidia-smi, 100 ms)"
}
filt() { grep -v '^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker\|^#'; }
for i in $(seq 1 40); do grep -q q30b "$O/mk.txt" 2> /dev/null && break; sleep 0.5; done
say "$(cat "$O/mk.txt")"
sess() { # GUILD TAG COMMIT
    watch 22 "sessions-$2" sh -c '"$0" "$@" 2>&1 | grep -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker\|^#"' \
        "$1" bench sessions -m $m --gpu-mem 8G --threads 14 --sessions 1,4,16 --prompt 128 --gen 8 -v \
        --commit "$3" --json "$O/sessions-$2.json"
}
[ -f $m ] && sess "$B/guild" new "$commit"
[ -f $m ] && sess "$P/base/guild" base "$base_commit"
rm -f $m
for i in $(seq 1 40); do [ -f /tmp/ds4-vram.done ] && break; sleep 0.5; done
say "$(tail -1 "$O/mk.txt")"
ds() { # GUILD TAG COMMIT
    watch 24 "ds4-$2" sh -c '"$0" "$@" 2>&1 | grep -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker\|^#"' \
        "$1" bench run -m $d --gpu-mem 16G --populate 512 --gen 8 --runs 1 --threads 14 --batch 4096 -v \
        --commit "$3" --json "$O/ds4-$2.json"
}
[ -f $d ] && ds "$B/guild" new "$commit"
[ -f $d ] && ds "$P/base/guild" base "$base_commit"
rm -f $d /tmp/ds4-vram.done
say done
