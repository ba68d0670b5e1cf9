#!/usr/bin/env bash
# Session 36's closing call (issues 17 and 18): the merged tip against the session's start, from the repo root with
# the pack unpacked in $C (bin/, lib/, COMMIT, base/ with main's guild, workers and stager, BASE_COMMIT):
#   C=/tmp/c bash bench/device/sess36b.sh [SECONDS] [REPEAT]
# 1. every CUDA test program (alltests.sh, 4 at a time) while the CPU tests of the new quantizer and pool
#    (check_kernels, check_pool, check_expert_pipe, check_expert_share) run on this host's CPU and guild-mkmodel
#    writes the Qwen3-30B-A3B shape;
# 2. `guild bench experts --tokens 1 --profile` (the pipeline's activation wait);
# 3. `guild bench sessions --sessions 16 --repeat REPEAT --probes 1` at 8G: the tip and the start with the CPU
#    worker's 14 threads (the default plan), the tip with 16 and 15 (`--cpu-nodes 0-15 --threads 16`, `--cpu-nodes
#    0-14 --threads 15`: the plan then leaves no CPU, or one, to the GPU worker and the coordinator);
# 4. A/B against the start, alternating: decode with every expert in RAM (new, base, new, base); all-GPU decode.
# Every step is budgeted (lib.sh's step). Output under $OUT: sess36b.log and sess36b-files.tar.gz.
set -u
budget=${1:-370}
repeat=${2:-5}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=$C/base
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-sess36b-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/sess36b.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
say "sess36b: commit $commit base $base_commit; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
m=/tmp/q30b.gguf
(timeout -s KILL 80 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o $m \
    > "$O/mk.txt" 2>&1
    echo "mkmodel rc=$?" >> "$O/mk.txt") &
mk=$!
(for t in check_kernels check_pool check_expert_pipe check_expert_share; do
    [ -x "$B/tests/$t" ] || { echo "$t: not packed"; continue; }
    timeout -s KILL 100 env CK_DEFAULT_TIMEOUT=300 "$B/tests/$t" > "$O/$t.txt" 2>&1
    echo "$t rc=$? $(grep -E '^[0-9]+%: Checks' "$O/$t.txt")"
done > "$O/cpu-checks.txt") &
ck=$!
OUT=$R C=$C bash bench/device/alltests.sh 110 0 4
wait $mk $ck
cat "$O/cpu-checks.txt" "$O/mk.txt"
grep -q "mkmodel rc=0" "$O/mk.txt" || { tar -czf "$R/sess36b-files.tar.gz" -C "$O" .; exit 1; }
bin_of() { case $1 in base*) echo "$BASE" ;; *) echo "$B" ;; esac; }
commit_of() { case $1 in base*) echo "$base_commit" ;; *) echo "$commit" ;; esac; }
step 20 "bench experts --tokens 1 --profile" sh -c '"$0" "$@" > "'"$O"'/experts-1.txt" 2>&1; st=$?;
    grep -vE "^# (guild|date|host|cpu|features|command)" "'"$O"'/experts-1.txt" | tail -n 12; exit $st' \
    "$B/guild" bench experts --shape qwen3-30b-a3b --type q4_K --down-type q6_K --tokens 1 --threads 14 \
    --runs 5 --steps 48 --prefill 0 --profile
sessions() { # SIDE NAME FLAGS...
    side=$1 name=$2
    shift 2
    step $((15 + 4 * repeat)) "guild bench sessions 16 at 8G ($name)" \
        sh -c '"$0" "$@" > "'"$O"'/sessions-'"$name"'.txt" 2>&1; st=$?;
        grep -A1 "^sessions decode tok/s   step" "'"$O"'/sessions-'"$name"'.txt";
        grep -A1 "tok/s    paired" "'"$O"'/sessions-'"$name"'.txt"; exit $st' \
        "$(bin_of $side)/guild" bench sessions -m $m --gpu-mem 8G --sessions 16 --prompt 128 --gen 16 \
        --repeat "$repeat" --probes 1 --commit "$(commit_of $side)" --json "$O/sessions-$name.json" "$@"
}
sessions new new14 --threads 14
sessions new new16 --threads 16 --cpu-nodes 0-15
sessions base base14 --threads 14
sessions new new15 --threads 15 --cpu-nodes 0-14
for side in new base new2 base2; do
    step 35 "experts in RAM decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$(bin_of $side)/guild" bench run -m $m --populate 512 --gen 48 --runs 3 --threads 14 --gpu-experts none \
        --json "$O/ram-$side.json"
done
for side in new base; do
    step 30 "all-GPU decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "^ +512 " | tail -n 1' \
        "$(bin_of $side)/guild" bench run -m $m --populate 512 --gen 64 --runs 3 --threads 14 --single-process \
        --json "$O/allgpu-$side.json"
done
rm -f $m
tar -czf "$R/sess36b-files.tar.gz" -C "$O" .
say "sess36b done"
