#!/usr/bin/env bash
# Session 29, dense16 (issue 18): one call. The few-token tensor-core kernel of the dense products (matmul.cu's
# matmul_few_kernel): its bits (check_cuda_expert_mma "few bits": every path against the dp4a kernel and one-token
# launches at 2-31 tokens, Q/K/V launches) and "dense bits" (every mma type), its timings at 1/2/4/8/16 tokens
# ("few timing"), `guild bench sessions` at 1, 4 and 16 sessions, new then the baseline, and guild-cuda-prof at 16
# sessions if the budget allows. Usage: C=/tmp/c bash .carry-dense16/dense16.sh [SECONDS]
set -u
t0=$(date +%s)
budget=${1:-180}
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
    "new $commit, base $base_commit"
m=/tmp/q30b.gguf
# the model on the CPUs while the bit checks run on the GPU
(timeout -s KILL 60 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 12 -q -o $m > "$O/mkmodel.log" 2>&1
    echo "rc=$? (guild-mkmodel)" >> "$O/mkmodel.log") &
mk=$!
T=$B/tests/cuda/check_cuda_expert_mma
step 70 "few bits" sh -c 'CK_RUN_CASE="few bits" "$0" > "'"$O/few-bits.txt"'" 2>&1; st=$?; grep -cE "^PASS" "'"$O/few-bits.txt"'"; grep -E "^FAIL|differ from|Failures|Checks" "'"$O/few-bits.txt"'" | head -n 20; exit $st' "$T"
step 40 "few timing" sh -c 'CK_RUN_CASE="few timing" "$0" > "'"$O/few-timing.txt"'" 2>&1; st=$?; grep -E "few timing|Checks" "'"$O/few-timing.txt"'"; exit $st' "$T"
wait $mk
cat "$O/mkmodel.log"
[ -f $m ] || { say "no model"; exit 1; }
sessions() { # TAG GUILD COMMIT
    step 40 "guild bench sessions ($1)" "$2" bench sessions -m $m --gpu-mem 8G --threads 14 \
        --sessions 1,4,16 --prompt 128 --gen 16 --repeat 3 --commit "$3" --json "$O/sessions-$1.json"
}
sessions new "$B/guild" "$commit"
sessions base "$C/base/guild" "$base_commit"
if [ -x "$B/bench/guild-cuda-prof" ]; then
    step 25 "guild-cuda-prof --sessions 16" sh -c '"$0" "$@" > "'"$O/prof-s16.txt"'" 2>&1; st=$?; grep -E "step|busy|matmul" "'"$O/prof-s16.txt"'" | head -n 30; exit $st' \
        "$B/bench/guild-cuda-prof" -m $m --gpu-mem 8G --threads 14 --sessions 16 --populate 128 --steps 16
fi
step 30 "dense bits" sh -c 'CK_RUN_CASE="dense bits" "$0" > "'"$O/dense-bits.txt"'" 2>&1; st=$?; grep -cE "^PASS" "'"$O/dense-bits.txt"'"; grep -E "^FAIL|differ from|Checks" "'"$O/dense-bits.txt"'" | head -n 20; exit $st' "$T"
say "done"
