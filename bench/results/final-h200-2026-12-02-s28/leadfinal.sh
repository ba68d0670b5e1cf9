#!/usr/bin/env bash
# Session 28's consolidated device call (lead), from the repo root with the pack unpacked in $C:
#   C=/tmp/c bash .carry-lead/leadfinal.sh [SECONDS]
# 1. every CUDA test program, mkmodel_greedy.sh and spec_cuda.sh (bench/device/alltests.sh, 4 at a time), while
#    check_amx and check_kernels run on the real AMX tiles and the Qwen3-30B-A3B shape is written;
# 2. A/B of main's tip against the session's start ($C/base): all-GPU decode (new, base, new, base) and decode
#    with every expert in RAM of the 30B shape (guild bench run, medians of 3).
set -u
budget=${1:-200}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=$C/base
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "lead final: commit $(cat "$C/COMMIT" 2>/dev/null) base $(cat "$C/BASE_COMMIT" 2>/dev/null)"
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
OUT=$O C=$C bash bench/device/alltests.sh 110 0 4
say "alltests ended; waiting for the CPU checks and the model"
wait $mk $ck
grep -E "^[0-9]+%: Checks|rc=" "$O/cpu-checks.txt"
cat "$O/mk.txt"
if grep -q "mkmodel rc=0" "$O/mk.txt"; then
    # interleaved (new, base, new, base): a slow phase of the VM shows as a pair out of line, not as a verdict
    for side in new base new2 base2; do
        bin=$B
        case $side in base*) bin=$BASE ;; esac
        step 40 "all-GPU decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 |DRAM read" | tail -n 8' \
            "$bin/guild" bench run -m $m --populate 512 --gen 64 --runs 3 --threads 14 --single-process \
            --json "$O/allgpu-$side.json"
    done
    for side in new base; do
        bin=$B
        [ $side = base ] && bin=$BASE
        step 45 "experts in RAM decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 |DRAM read|wait" | tail -n 8' \
            "$bin/guild" bench run -m $m --populate 512 --gen 48 --runs 3 --threads 14 --gpu-experts none \
            --json "$O/ram-$side.json"
    done
fi
rm -f $m
say "lead final done"
