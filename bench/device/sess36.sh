#!/usr/bin/env bash
# Session 36's lead call (issues 17 and 18), from the repo root with the pack unpacked in $C (bin/, lib/, COMMIT,
# base/ with the session start's guild, workers, stager and guild-cuda-prof, BASE_COMMIT):
#   C=/tmp/c bash bench/device/sess36.sh [SECONDS] [REPEAT]
# 1. every CUDA test program (alltests.sh, 4 at a time, 120 s) while guild-mkmodel writes the Qwen3-30B-A3B shape;
# 2. A/B of the tip against the start: all-GPU decode (new, base, new, base); the CPU experts' pipeline alone
#    (`guild bench experts`, the shape's Q4_K gate/up and Q6_K down, 14 threads) at 1, 4, 8 and 16 tokens a step;
#    `guild bench sessions --sessions 16 --repeat REPEAT --probes 1` at 8G, new, base, new; decode with every
#    expert in RAM, new then base; the 16-session step clock (guild-cuda-prof --phases) of both.
# Every step is budgeted (lib.sh's step). Output under $OUT: sess36.log and sess36-files.tar.gz.
set -u
budget=${1:-420}
repeat=${2:-10}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=$C/base
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-sess36-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/sess36.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
say "sess36: commit $commit base $base_commit; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
lscpu | grep -E "Model name|L2|L3|^CPU\(s\)" | tee "$O/lscpu.txt"
m=/tmp/q30b.gguf
(timeout -s KILL 80 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o $m \
    > "$O/mk.txt" 2>&1
    echo "mkmodel rc=$?" >> "$O/mk.txt") &
mk=$!
OUT=$R C=$C bash bench/device/alltests.sh 120 0 4
wait $mk
cat "$O/mk.txt"
grep -q "mkmodel rc=0" "$O/mk.txt" || { tar -czf "$R/sess36-files.tar.gz" -C "$O" .; exit 1; }
bin_of() { case $1 in base*) echo "$BASE" ;; *) echo "$B" ;; esac; }
commit_of() { case $1 in base*) echo "$base_commit" ;; *) echo "$commit" ;; esac; }
for side in new base new2 base2; do
    step 30 "all-GPU decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 5' \
        "$(bin_of $side)/guild" bench run -m $m --populate 512 --gen 64 --runs 3 --threads 14 --single-process \
        --json "$O/allgpu-$side.json"
done
for t in 1 4 8 16; do
    step 40 "bench experts --tokens $t" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/experts-'"$t"'.txt" | grep -E "tokens=|probe"' \
        "$B/guild" bench experts --shape qwen3-30b-a3b --type q4_K --down-type q6_K --tokens $t --threads 14 \
        --runs 5 --steps 48 --prefill 0
done
for side in new base new2; do
    step $((20 + 4 * repeat)) "guild bench sessions 16 at 8G ($side)" \
        sh -c '"$0" "$@" > "'"$O"'/sessions-'"$side"'.txt" 2>&1; st=$?;
        sed -n "/^# paired: each/,\$p" "'"$O"'/sessions-'"$side"'.txt"; exit $st' \
        "$(bin_of $side)/guild" bench sessions -m $m --gpu-mem 8G --threads 14 --sessions 16 --prompt 128 \
        --gen 16 --repeat "$repeat" --probes 1 --commit "$(commit_of $side)" --json "$O/sessions-$side.json"
done
for side in new base; do
    step 40 "experts in RAM decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 |wait" | tail -n 6' \
        "$(bin_of $side)/guild" bench run -m $m --populate 512 --gen 48 --runs 3 --threads 14 --gpu-experts none \
        --json "$O/ram-$side.json"
done
for side in new base; do
    [ -x "$(bin_of $side)/guild-cuda-prof" ] || [ -x "$(bin_of $side)/bench/guild-cuda-prof" ] || continue
    p=$(bin_of $side)/bench/guild-cuda-prof
    [ -x "$p" ] || p=$(bin_of $side)/guild-cuda-prof
    step 45 "16-session step clock ($side)" sh -c '"$0" "$@" > "'"$O"'/phases16-'"$side"'.txt" 2>&1; st=$?;
        tail -n 40 "'"$O"'/phases16-'"$side"'.txt"; exit $st' \
        "$p" -m $m --sessions 16 --populate 140 --gpu-mem 8G --threads 14 --steps 16 --phases --no-trace
done
rm -f $m
tar -czf "$R/sess36-files.tar.gz" -C "$O" .
say "sess36 done"
