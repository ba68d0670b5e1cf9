#!/usr/bin/env bash
# Session 27's populated-context points of issue 18 still missing at --gpu-mem 8G on the Qwen3-30B-A3B-shaped file
# (bench/results/kvcurves-h200-2026-12-02-s27.md), in one call: f16 at 131,072 (its cache in host RAM), f16 at
# 4,096-65,536 (GPU memory), q8_0 at 131,072 (host RAM), q8_0 at 4,096-65,536 (GPU memory). Each placement is a
# `guild bench run --sweep` of its own (a stack of its own either way; apart, each has its --gen and its JSON, and
# a run that cannot finish in what is left is not started). The order: the first host-RAM run (all or nothing:
# one 131,072-token prompt) first, so that a failure of that placement shows early; f16's GPU-memory sweep; q8_0 at
# 131,072, the longest (~145 s), when what is left holds it; q8_0's GPU-memory sweep last (only its 65,536 is new;
# a sweep killed at the budget keeps its finished contexts in the log). The model is written once; a file another
# call of this session left at /tmp/q30b.gguf (or /tmp/q30b-vram.gguf) is taken only when its size and the md5 of
# 16 MiB sampled across it match what guild-mkmodel writes (KVCURVES_DIGEST, from the same command on the VM:
# f750f8e85ae1fa9bd14ef9a7955c3c18 for session 27's writer). Every step runs under `timeout -s KILL` and the log
# goes to $OUT as it is written. Run from the repo root:
#   C=DIR bash $C/kvcurves.sh [SECONDS]
# with the pack (repack.sh BUILD, then tar | xz) in $C/c.tar.xz. Output under $OUT: kvcurves.log, the runs' JSON
# (FORMAT-gpu.json, FORMAT-host.json) and raw.tgz (the bench runs' own logs).
set -u
budget=${1:-300}
C=${C:-$PWD/.carry-kvcurves}
P=/tmp/guild-kvcurves
O=${OUT:-/tmp/guild-out}
mkdir -p "$O" "$O/logs"
exec > >(tee -a "$O/kvcurves.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
left() { echo $((budget - ($(date +%s) - t0))); }
mkdir -p $P && tar -C $P -xJf "$C/c.tar.xz" || { say "cannot unpack $C/c.tar.xz"; exit 1; }
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; budget ${budget} s"

# the model: 16 samples of 1 MiB at evenly spaced offsets, their md5 (cheap beside writing 18.6 GB again)
m=/tmp/q30b.gguf
size=18554141664
digest() { for i in $(seq 0 15); do dd if="$1" bs=1M skip=$((i * (size / 1048576 - 1) / 15)) count=1 2> /dev/null; done |
    md5sum | cut -c1-32; }
reused=
for f in /tmp/q30b.gguf /tmp/q30b-vram.gguf; do # the names other scripts of this session write it under
    if [ -f $f ] && [ "$(stat -c %s $f)" = $size ] && [ -n "${KVCURVES_DIGEST:-}" ] &&
        [ "$(digest $f)" = "$KVCURVES_DIGEST" ]; then
        m=$f reused=1
        say "model: $m as an earlier call wrote it (size and sampled digest $KVCURVES_DIGEST match)"
        break
    fi
done
if [ -z "$reused" ]; then
    rm -f $m $m.routing
    step 40 "model: Qwen3-30B-A3B shape, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
        --threads "$(nproc)" -q -o $m
    [ "$(stat -c %s $m 2> /dev/null)" = $size ] || { say "no model"; exit 1; }
    say "model digest $(digest $m)"
fi
rm -f $m.routing # a routing profile beside it would decide the resident experts

# one placement of one format: NAME FORMAT CONTEXTS GEN ESTIMATE CAP (s): run when ESTIMATE fits in what is
# left, killed after CAP (a run far slower than planned leaves the others their time)
run() { # (not "name": lib.sh's step sets it)
    tag=$1 fmt=$2 pop=$3 gen=$4 est=$5 cap=$6
    l=$(left)
    if [ "$l" -lt "$est" ]; then
        say "not run (budget): $tag needs ~$est s, $l s left"
        return
    fi
    lim=$((l - 2 < cap ? l - 2 : cap))
    step "$lim" "$tag: bench run --sweep --kv-type $fmt --populate $pop --gen $gen (~$est s)" sh -c \
        '"$0" "$@" 2>&1 | tee "'"$O/logs/$tag.out"'" | grep --line-buffered -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker"' \
        "$B/guild" bench run -m $m --sweep --populate "$pop" --gen "$gen" --runs 1 --threads 14 --batch 4096 \
        --gpu-mem 8G --kv-type "$fmt" --commit "$commit" --json "$O/$tag.json"
    # a run killed at its limit: its workers end on their parent's death (SIGTERM); the next run waits for them
    for i in $(seq 20); do
        pgrep -f 'guild-(gpu|cpu)-worker|guild-stager' > /dev/null || break
        sleep 0.5
    done
}
run f16-host f16 131072 8 100 140
run f16-gpu f16 4096,16384,32768,65536 16 60 90
run q8_0-host q8_0 131072 8 150 600
run q8_0-gpu q8_0 4096,16384,32768,65536 16 56 80

# every bench table as it ended
grep -h -A12 '^# guild bench run' "$O"/logs/*.out 2> /dev/null | grep -v '^--$'
cd "$O" && tar -czf /tmp/kvcurves-raw.tgz logs && mv /tmp/kvcurves-raw.tgz raw.tgz && rm -rf logs
ls -l "$O"
say done
