#!/usr/bin/env bash
# A session's consolidated device call (the lead's, after the session's CUDA changes have landed), from the repo
# root with the pack unpacked in $C (bin/, lib/, COMMIT, base/ with the session start's guild and workers,
# BASE_COMMIT):   C=/tmp/c bash bench/device/lead.sh [SECONDS] [TEST_SECONDS] [SIZES] [REPEAT]
# (TEST_SECONDS: alltests.sh's share, default 110; spec_cuda.sh, its last step, needs ~150; SIZES and REPEAT:
# `guild bench sessions`' sizes and timed runs a size, default 1,2,4,8,16 and 3; the smallest size gives the
# limit's dense step)
# 1. every CUDA test program, mkmodel_greedy.sh and spec_cuda.sh (alltests.sh, 4 at a time), while check_amx and
#    check_kernels run on the real AMX tiles and guild-mkmodel writes the Qwen3-30B-A3B shape;
# 2. A/B of the tip against the session's start, medians of 3 each (issues 17, 18, 14's decode targets):
#    all-GPU decode; `guild bench sessions` at --gpu-mem 8G (paired probes); decode with every expert in RAM;
#    with bench/guild-cuda-prof in the pack, the tip's CUPTI profile with every expert in RAM (issue 17's GPU time
#    a layer); decode at --gpu-mem 8G with a routing profile recorded by the tip on a text prompt (hit rate).
# Every step is budgeted (lib.sh's step); what does not fit is skipped and said. Output under $OUT: lead.log and
# lead-files.tar.gz (the JSON, logs and the profile's plan).
set -u
budget=${1:-330}
tests_s=${2:-110}
sizes=${3:-1,2,4,8,16}
repeat=${4:-3}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=$C/base
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-lead-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/lead.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
say "lead: commit $commit base $base_commit; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
lscpu | grep -E "Model name|L2|L3|^CPU\(s\)" > "$O/lscpu.txt"
m=/tmp/q30b.gguf
(timeout -s KILL 80 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o $m \
    > "$O/mk.txt" 2>&1
    echo "mkmodel rc=$?" >> "$O/mk.txt") &
mk=$!
(timeout -s KILL 100 env CK_DEFAULT_TIMEOUT=300 "$B/tests/check_amx" > "$O/cpu-checks.txt" 2>&1
    echo "check_amx rc=$?" >> "$O/cpu-checks.txt"
    timeout -s KILL 100 env CK_DEFAULT_TIMEOUT=300 "$B/tests/check_kernels" >> "$O/cpu-checks.txt" 2>&1
    echo "check_kernels rc=$?" >> "$O/cpu-checks.txt") &
ck=$!
OUT=$R C=$C bash bench/device/alltests.sh "$tests_s" 0 4
say "alltests ended; waiting for the CPU checks and the model"
wait $mk $ck
grep -E "^[0-9]+%: Checks|rc=" "$O/cpu-checks.txt"
cat "$O/mk.txt"
grep -q "mkmodel rc=0" "$O/mk.txt" || { tar -czf "$R/lead-files.tar.gz" -C "$O" .; exit 1; }
bin_of() { case $1 in base*) echo "$BASE" ;; *) echo "$B" ;; esac; }
# the commit a side's JSON names: the baseline's binaries are of BASE_COMMIT (a session-33 call gave both sides COMMIT)
commit_of() { case $1 in base*) echo "$base_commit" ;; *) echo "$commit" ;; esac; }
for side in new base; do
    step 30 "all-GPU decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 5' \
        "$(bin_of $side)/guild" bench run -m $m --populate 512 --gen 64 --runs 3 --threads 14 --single-process \
        --json "$O/allgpu-$side.json"
done
for side in new base; do
    step $((20 + 8 * repeat)) "guild bench sessions $sizes at 8G ($side)" \
        sh -c '"$0" "$@" > "'"$O"'/sessions-'"$side"'.txt" 2>&1; st=$?;
        sed -n "/^# paired: each/,\$p" "'"$O"'/sessions-'"$side"'.txt"; exit $st' \
        "$(bin_of $side)/guild" bench sessions -m $m --gpu-mem 8G --threads 14 --sessions "$sizes" --prompt 128 \
        --gen 16 --repeat "$repeat" --probes 1 --commit "$(commit_of $side)" \
        --json "$O/sessions-$side.json"
done
for side in new base; do
    step 40 "experts in RAM decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 |wait" | tail -n 6' \
        "$(bin_of $side)/guild" bench run -m $m --populate 512 --gen 48 --runs 3 --threads 14 --gpu-experts none \
        --json "$O/ram-$side.json"
done
[ -x "$B/bench/guild-cuda-prof" ] && prof ram-cupti --gpu-experts none
# issue 14's profile: session 26's text prompt, the tip records the routing at 8G (whole layers resident)
prompt8 "$O/prompt.txt"
rm -f $m.routing
run8 record "$B" --record-routing $m.routing
if [ -f $m.routing ]; then
    "$B/guild" plan -m $m --backend cuda --gpu-mem 8G --routing $m.routing --ctx 4096 --batch 4096 \
        > "$O/plan-profile.txt" 2>&1
    run8 profile-new "$B" --routing $m.routing
    run8 profile-base "$BASE" --routing $m.routing
fi
rm -f $m $m.routing
tar -czf "$R/lead-files.tar.gz" -C "$O" .
say "lead done"
