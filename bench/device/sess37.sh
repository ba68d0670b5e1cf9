#!/usr/bin/env bash
# Session 37's first call (issues 18 and 17): the plan's one free CPU (15 CPU-worker threads on the device's 16)
# against main's two (14), from the repo root with the pack unpacked in $C (bin/, lib/, COMMIT, base/ with main's
# guild, workers and stager, BASE_COMMIT):
#   C=/tmp/c bash bench/device/sess37.sh [SECONDS] [REPEAT] [ROUNDS]
# 1. guild-mkmodel writes the Qwen3-30B-A3B shape; `guild plan` of both builds (the CPUs each worker gets);
# 2. ROUNDS rounds of `guild bench sessions --sessions 1,2,4,8,16 --repeat REPEAT --probes 1` at 8G, new then base,
#    each build's default plan (no --threads): their JSON is what `guild bench pool` pools afterwards;
# 3. decode with every expert in RAM (`--gpu-experts none`), alternating new, base, new, base, default plans.
# Every step is budgeted (lib.sh's step). Output under $OUT: sess37.log and sess37-files.tar.gz.
set -u
budget=${1:-480}
repeat=${2:-5}
rounds=${3:-2}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=$C/base
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-sess37-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/sess37.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
say "sess37: commit $commit base $base_commit; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
lscpu > "$O/lscpu.txt" 2>&1
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { tar -czf "$R/sess37-files.tar.gz" -C "$O" .; exit 1; }
bin_of() { case $1 in base*) echo "$BASE" ;; *) echo "$B" ;; esac; }
commit_of() { case $1 in base*) echo "$base_commit" ;; *) echo "$commit" ;; esac; }
for side in new base; do
    step 20 "guild plan ($side)" sh -c '"$0" "$@" 2>&1 | grep -iE "cpu-worker|threads|CPUs" | head -n 6' \
        "$(bin_of $side)/guild" plan -m $m --gpu-mem 8G
done
for r in $(seq 1 "$rounds"); do
    for side in new base; do
        name=$side-$r
        step $((25 + 12 * repeat)) "guild bench sessions 1-16 at 8G ($name)" \
            sh -c '"$0" "$@" > "'"$O"'/sessions-'"$name"'.txt" 2>&1; st=$?;
            grep -E "^(sessions| +[0-9]+ +[0-9])" "'"$O"'/sessions-'"$name"'.txt"; exit $st' \
            "$(bin_of $side)/guild" bench sessions -m $m --gpu-mem 8G --sessions 1,2,4,8,16 --prompt 128 --gen 16 \
            --repeat "$repeat" --probes 1 --commit "$(commit_of $side)" --json "$O/sessions-$name.json"
    done
done
for side in new base new2 base2; do
    step 35 "experts in RAM decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$(bin_of $side)/guild" bench run -m $m --populate 512 --gen 48 --runs 3 --gpu-experts none \
        --json "$O/ram-$side.json"
done
for f in "$O"/sessions-*.json; do [ -s "$f" ] && echo "$f"; done > "$O/pooled.list"
for side in new base; do
    step 15 "guild bench pool ($side)" sh -c '"$0" "$@" 2>&1 | tail -n 14' "$B/guild" bench pool \
        $(grep "sessions-$side-" "$O/pooled.list")
done
rm -f $m
tar -czf "$R/sess37-files.tar.gz" -C "$O" .
say "sess37 done"
