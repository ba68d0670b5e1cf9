#!/usr/bin/env bash
# sessgap2 (issue 18): the CUDA tests of batched decode, then `guild bench sessions` (1,2,4,8,16 sessions, experts in
# RAM, --gpu-mem 8G, Qwen3-30B-A3B shape) of the new build and of main's, then guild-cuda-prof --sessions 8 (new).
# Run from the repo root: bash .carry-sessgap2/run.sh [BUDGET_S]. Output: $OUT/run.log, tests.log, *.json, prof-s8.txt
set -u
t0=$(date +%s)
budget=${1:-160}
C=$PWD/.carry-sessgap2
P=/tmp/c
mkdir -p $P && tar -xJf "$C/c2.tar.xz" -C $P
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee -a "$O/run.log") 2>&1
. bench/device/lib.sh
commit=$(cat $P/COMMIT) base_commit=$(cat $P/BASE_COMMIT)
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit, baseline $base_commit"
m=/tmp/q30b.gguf
(timeout -s KILL 100 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 8 -q -o $m > "$O/mk.txt" 2>&1
    echo "rc=$?" >> "$O/mk.txt") &
mk=$!
for t in seq batch attn; do
    step 40 "check_cuda_$t" sh -c '"$0" > "'"$O"'/t.txt" 2>&1; st=$?; cat "'"$O"'/t.txt" >> "'"$O"'/tests.log"; grep -E "^[0-9]+%|FAIL|SKIP" "'"$O"'/t.txt" | tail -n 8; exit $st' "$B/tests/cuda/check_cuda_$t"
done
wait $mk
cat "$O/mk.txt"; rm -f "$O/mk.txt" "$O/t.txt"
sessions() { # GUILD TAG COMMIT
    step 36 "guild bench sessions ($2), --gpu-mem 8G" "$1" bench sessions -m $m --gpu-mem 8G --threads 14 \
        --sessions 1,2,4,8,16 --prompt 128 --gen 12 --commit "$3" --json "$O/sessions-$2.json"
}
if [ -f $m ]; then
    sessions "$B/guild" new "$commit"
    sessions "$P/base/guild" base "$base_commit"
    step 20 "guild-cuda-prof all on the GPU, 8 sessions (new)" sh -c '"$0" "$@" > "'"$O/prof-s8.txt"'"; st=$?; cat "'"$O/prof-s8.txt"'"; exit $st' \
        "$B/bench/guild-cuda-prof" -m $m --sessions 8 --populate 64 --steps 6 --threads 14
fi
step 15 "check_cuda_kernels" sh -c '"$0" > "'"$O"'/t.txt" 2>&1; st=$?; cat "'"$O"'/t.txt" >> "'"$O"'/tests.log"; grep -E "^[0-9]+%|FAIL" "'"$O"'/t.txt" | tail -n 4; rm -f "'"$O"'/t.txt"; exit $st' "$B/tests/cuda/check_cuda_kernels"
say "done"
