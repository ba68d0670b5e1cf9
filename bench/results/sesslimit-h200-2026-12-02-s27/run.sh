#!/usr/bin/env bash
# Session 27, sesslimit (issue 18): one call. The Qwen3-30B-A3B-shaped model written in the background while
# check_cuda_expert_mma's dense bits (cuda_matmul's mma path for many rows from 8 tokens = dp4a) and dense timing
# (4 .. 4096 tokens) run; then `guild bench sessions` at --gpu-mem 8G, multi-process: the new build (3 runs of 16
# steps a size, DRAM probes before and after each size), the baseline 72d583c (one run of 48 steps: its tool has
# no --repeat; `guild bench bw` probes before and after it), and the new build again if the budget allows.
# nvidia-smi's compute processes sampled every 2 s through the session runs (whether the coordinator holds a
# CUDA context beside the GPU worker's). Usage: C=/tmp/c bash .carry-sesslimit/run.sh [SECONDS]
set -u
t0=$(date +%s)
budget=${1:-150}
C=${C:-/tmp/c}
B=$C/bin
export LD_LIBRARY_PATH=$C/lib
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee -a "$O/run.log") 2>&1
. bench/device/lib.sh
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; new $commit, base $base_commit"
m=/tmp/q30b.gguf
(timeout -s KILL 90 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 8 -q -o $m > "$O/mkmodel.log" 2>&1
    echo "rc=$? $(date -u +%T)" >> "$O/mkmodel.log") &
mk=$!
step 30 "check_cuda_expert_mma dense bits" sh -c 'CK_RUN_CASE="dense bits" "$0" > "$1" 2>&1; st=$?; grep -c "^PASS" "$1"; grep -v "^PASS" "$1" | tail -n 5; exit $st' \
    "$B/tests/cuda/check_cuda_expert_mma" "$O/mma-bits.log"
step 45 "check_cuda_expert_mma dense timing" sh -c 'CK_RUN_CASE="dense timing" "$0" > "$1" 2>&1; st=$?; grep -E "tokens:|PASS|FAIL|timing" "$1" | grep -E " (4|8|16) tokens|PASS|FAIL|timing" ; exit $st' \
    "$B/tests/cuda/check_cuda_expert_mma" "$O/mma-timing.log"
wait $mk
cat "$O/mkmodel.log"
[ -f $m ] || { say "no model"; exit 1; }
(while :; do echo "$(date -u +%T) $(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | tr '\n' ';') $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"; sleep 2; done > "$O/smi.log" 2>&1) &
smi=$!
new() { # TAG
    step 45 "guild bench sessions (new $1)" "$B/guild" bench sessions -m $m --gpu-mem 8G --threads 14 \
        --sessions 1,2,4,8,16 --prompt 128 --gen 16 --repeat 3 --probes 2 --commit "$commit" --json "$O/sessions-$1.json"
}
bw() { # TAG
    timeout -s KILL 10 "$B/guild" bench bw --gb 4 --passes 5 2>&1 | sed "s/^/bw $1: /"
}
new new
bw base-before1
bw base-before2
step 40 "guild bench sessions (base)" "$C/base/guild" bench sessions -m $m --gpu-mem 8G --threads 14 \
    --sessions 1,2,4,8,16 --prompt 128 --gen 48 --commit "$base_commit" --json "$O/sessions-base.json"
bw base-after1
bw base-after2
new new2
kill $smi
grep -h "over the budget" "$O/run.log" | sort | uniq -c
say "done"
