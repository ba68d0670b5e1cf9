#!/usr/bin/env bash
# Session 29, dense16 (issue 18), second call: the few-token kernel's shapes as measured in the first call
# (dense16.sh: 8 warps, 16-token tiles for products of 4096 rows or more, the output head up to 16 tokens):
# check_cuda_expert_mma's "few bits" and "dense bits" again beside guild-mkmodel's Qwen3-30B-A3B shape, then
# guild-cuda-prof at 16 sessions (--gpu-mem 8G): the decode step's kernels. Usage: C=/tmp/c bash dense16b.sh [SECONDS]
set -u
t0=$(date +%s)
budget=${1:-60}
C=${C:-/tmp/c}
B=$C/bin
export LD_LIBRARY_PATH=$C/lib
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee -a "$O/run.log") 2>&1
. bench/device/lib.sh
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "new $(cat "$C/COMMIT" 2> /dev/null || echo unknown)"
m=${M:-/tmp/q30b.gguf}
(timeout -s KILL 40 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 12 -q -o $m > "$O/mkmodel.log" 2>&1
    echo "rc=$? (guild-mkmodel)" >> "$O/mkmodel.log") &
mk=$!
T=$B/tests/cuda/check_cuda_expert_mma
for c in "few bits" "dense bits"; do
    f=$O/$(echo "$c" | tr ' ' -).txt
    (CK_RUN_CASE="$c" timeout -s KILL 40 "$T" > "$f" 2>&1; echo "rc=$? ($c)" >> "$f") &
done
wait $mk
cat "$O/mkmodel.log"
while [ -n "$(jobs -pr | head -1)" ] && [ $(($(date +%s) - t0)) -lt 45 ]; do sleep 1; done
for c in few-bits dense-bits; do
    say "$c: $(grep -cE '^PASS' "$O/$c.txt") PASS lines, $(grep -cE '^FAIL' "$O/$c.txt") FAIL; $(grep -E '^[0-9]+%: Checks' "$O/$c.txt") $(tail -1 "$O/$c.txt")"
    grep -E "^FAIL|differ from|:[EF]:" "$O/$c.txt" | head -n 12
done
[ -f $m ] || { say "no model"; exit 1; }
step 25 "guild-cuda-prof --sessions 16" sh -c '"$0" "$@" > "'"$O/prof-s16.txt"'" 2>&1; st=$?; sed -n "/^step wall/,/^copies/p" "'"$O/prof-s16.txt"'" | head -n 30; exit $st' \
    "$B/bench/guild-cuda-prof" -m $m --gpu-mem 8G --threads 14 --sessions 16 --populate 128 --steps 16
say "done"
