#!/usr/bin/env bash
# Session 29, dense16 (issue 18): one call. The few-token tensor-core kernel of the dense products (matmul.cu's
# matmul_few_kernel): its bits (check_cuda_expert_mma "few bits": every path against the dp4a kernel and one-token
# launches at 2-31 tokens, Q/K/V launches; "dense bits": every mma type) beside guild-mkmodel's Qwen3-30B-A3B shape,
# its timings at 1/2/4/8/16 tokens ("few timing"), `guild bench sessions` at 1, 4 and 16 sessions, new then the
# baseline, greedy ids of both (all on the GPU), and guild-cuda-prof at 16 sessions if the budget allows.
# Usage: C=/tmp/c bash .carry-dense16/dense16.sh [SECONDS]
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
m=${M:-/tmp/q30b.gguf}
# the model on the CPUs while the bit checks run on the GPU
(timeout -s KILL 60 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 12 -q -o $m > "$O/mkmodel.log" 2>&1
    echo "rc=$? (guild-mkmodel)" >> "$O/mkmodel.log") &
mk=$!
T=$B/tests/cuda/check_cuda_expert_mma
# the bit checks at once, in the background (the few-token kernel's cases; every mma type's dense cases)
for c in "few bits" "dense bits"; do
    f=$O/$(echo "$c" | tr ' ' -).txt
    (CK_RUN_CASE="$c" timeout -s KILL 80 "$T" > "$f" 2>&1; echo "rc=$? ($c)" >> "$f") &
done
wait $mk
cat "$O/mkmodel.log"
while [ -n "$(jobs -pr | head -1)" ] && [ $(($(date +%s) - t0)) -lt 90 ]; do sleep 1; done
for c in few-bits dense-bits; do
    say "$c: $(grep -cE '^PASS' "$O/$c.txt") PASS lines, $(grep -cE '^FAIL' "$O/$c.txt") FAIL; $(grep -E '^[0-9]+%: Checks' "$O/$c.txt") $(tail -1 "$O/$c.txt")"
    grep -E "^FAIL|differ from|:[EF]:" "$O/$c.txt" | head -n 12
done
step 40 "few timing" sh -c 'CK_RUN_CASE="few timing" "$0" > "'"$O/few-timing.txt"'" 2>&1; st=$?; grep -E "few timing|Checks" "'"$O/few-timing.txt"'"; exit $st' "$T"
[ -f $m ] || { say "no model"; exit 1; }
sessions() { # TAG GUILD COMMIT
    step 40 "guild bench sessions ($1)" "$2" bench sessions -m $m --gpu-mem 8G --threads 14 \
        --sessions 1,4,16 --prompt 128 --gen 16 --repeat 3 --commit "$3" --json "$O/sessions-$1.json"
}
sessions new "$B/guild" "$commit"
sessions base "$C/base/guild" "$base_commit"
greedy() { # TAG BINDIR: 64 greedy ids all on the GPU (prefill chunks' tails take the few-token kernel)
    [ -s /tmp/rep.txt ] || for i in $(seq 1 40); do printf 'one two three four five, '; done > /tmp/rep.txt
    step 20 "guild run $1" sh -c '"$0" "$@" > /dev/null 2> "'"$O/greedy-$1.log"'"; st=$?; grep "decode:" "'"$O/greedy-$1.log"'"; exit $st' \
        "$2/guild" run -m $m -f /tmp/rep.txt -n 64 --temp 0 --ignore-eos --threads 14 --ctx 1024 \
        --backend cuda --single-process --ids-out "$O/ids-$1.ids"
}
greedy new "$B"
greedy base "$C/base"
[ -s "$O/ids-new.ids" ] && [ -s "$O/ids-base.ids" ] && { cmp -s "$O/ids-new.ids" "$O/ids-base.ids" && say "greedy ids equal" || say "greedy ids DIFFER"; }
if [ -x "$B/bench/guild-cuda-prof" ]; then
    step 25 "guild-cuda-prof --sessions 16" sh -c '"$0" "$@" > "'"$O/prof-s16.txt"'" 2>&1; st=$?; sed -n "/^step clock/,\$p" "'"$O/prof-s16.txt"'" | head -n 40; exit $st' \
        "$B/bench/guild-cuda-prof" -m $m --gpu-mem 8G --threads 14 --sessions 16 --populate 128 --steps 16
fi
say "done"
