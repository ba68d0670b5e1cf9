#!/usr/bin/env bash
# sessattn (issue 18, session 26): the CUDA tests of batched decode (check_cuda_seq with the row-table kernels,
# check_cuda_batch, check_cuda_attn), check_cuda_kernels' cases of the kernels changed (the plain products' rows,
# qk_prepare, rope, the router, the decode attention, the block caches; after the first pair of benchmarks), and
# `guild bench sessions` (1,2,4,8,16 sessions, experts in RAM, --gpu-mem 8G, Qwen3-30B-A3B shape) of the new build
# and of main's, twice each, alternating; then guild-cuda-prof --sessions 8
# (new) if the budget allows. Run from the repo root: bash .carry-sessattn/run.sh [BUDGET_S].
# Output: $OUT/run.log, tests.log, sessions-*.json, prof-s8.txt
set -u
t0=$(date +%s)
budget=${1:-180}
C=$PWD/.carry-sessattn
P=/tmp/c-sessattn
rm -rf $P; mkdir -p $P && tar -xJf "$C/c.tar.xz" -C $P
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee -a "$O/run.log") 2>&1
. bench/device/lib.sh
commit=$(cat $P/COMMIT) base_commit=$(cat $P/BASE_COMMIT)
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit, baseline $base_commit"
m=/tmp/q30b-sessattn.gguf
(timeout -s KILL 100 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 8 -q -o $m > "$O/mk.txt" 2>&1
    echo "rc=$?" >> "$O/mk.txt") &
mk=$!
t() { # LIMIT PROGRAM [CK_RUN_CASE]
    step "$1" "$2${3:+ ($3)}" sh -c 'CK_RUN_CASE="$1" "$0" > "'"$O"'/t.txt" 2>&1; st=$?; cat "'"$O"'/t.txt" >> "'"$O"'/tests.log"; grep -E "^[0-9]+%|FAIL|SKIP|Error" "'"$O"'/t.txt" | tail -n 8; exit $st' "$B/tests/cuda/$2" "${3:-}"
}
t 60 check_cuda_seq
t 30 check_cuda_batch
t 30 check_cuda_attn
timeout -s KILL 60 tail --pid=$mk -f /dev/null
cat "$O/mk.txt"; rm -f "$O/mk.txt" "$O/t.txt"
sessions() { # GUILD TAG COMMIT
    step 36 "guild bench sessions ($2), --gpu-mem 8G" "$1" bench sessions -m $m --gpu-mem 8G --threads 14 \
        --sessions 1,2,4,8,16 --prompt 128 --gen 12 --commit "$3" --json "$O/sessions-$2.json"
}
if [ -f $m ]; then
    sessions "$B/guild" new "$commit"
    sessions "$P/base/guild" base "$base_commit"
    for c in matmul qk_prepare rope router attention kv_blocks; do t 15 check_cuda_kernels $c; done
    sessions "$B/guild" new2 "$commit"
    sessions "$P/base/guild" base2 "$base_commit"
    [ -x "$B/bench/guild-cuda-prof" ] &&
        step 20 "guild-cuda-prof all on the GPU, 8 sessions (new)" sh -c '"$0" "$@" > "'"$O/prof-s8.txt"'"; st=$?; cat "'"$O/prof-s8.txt"'"; exit $st' \
            "$B/bench/guild-cuda-prof" -m $m --sessions 8 --populate 64 --steps 6 --threads 14
fi
say "done"
