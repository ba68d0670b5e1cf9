#!/usr/bin/env bash
# Issue 17's routed experts of a decode step, session 28 (experts): this build against a baseline in one call, the
# most telling first, every step budgeted:
#   - check_cuda_fused's expert_time case alone (the GPU otherwise idle): a decode step's routed experts at the
#     Qwen3-30B-A3B shape, 1 and 4 tokens, the routed launches and cuda_expert_pairs's direct and staged kernels;
#   - the CUDA tests (check_cuda_fused: both kernels = the routed launches bit for bit, every type, 1-13 tokens;
#     _kernels, _backend, _seq) beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - guild-cuda-prof --phases --no-trace of both builds (the untraced step clock, layer 0's routed experts apart);
#   - `guild bench run --populate 512 --gen 64 --runs 3 --single-process` of both builds, all on the GPU;
#   - greedy ids of both builds on a repetitive prompt (64 tokens, all on the GPU): equal.
# Run from the repo root:  bash bench/device/experts2.sh [SECONDS [quick]]
# quick (a second call of the session, short of device time): no baseline step clock and no greedy runs.
# with the pack in $C/c.tar.xz: bin/ (guild, tools/guild-mkmodel, bench/guild-cuda-prof, tests/cuda/check_cuda_*),
# lib/, COMMIT, and base/ (the baseline's guild and guild-cuda-prof) with BASE_COMMIT. Output: $OUT/experts2.log
# and $OUT/experts2-files.tar.gz (the tests' logs, prof-*.txt, the runs' output and JSON, the ids).
set -u
budget=${1:-170}
quick=${2:-}
C=${C:?C: the folder of the pack}
P=/tmp/guild-experts2
mkdir -p $P && tar -C $P -xJf "$C/c.tar.xz"
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-experts2-out
mkdir -p "$R" "$O"
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$P/BASE_COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$R/experts2.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
step 25 "expert pairs, timed alone" sh -c 'CK_RUN_CASE=expert_time "$0" > "'"$O/expert_time.log"'" 2>&1; st=$?;
    grep "^time:" "'"$O/expert_time.log"'"; tail -1 "'"$O/expert_time.log"'"; exit $st' "$B/tests/cuda/check_cuda_fused"
tests="check_cuda_fused check_cuda_kernels check_cuda_backend check_cuda_seq"
pids=
for t in $tests; do
    (timeout -s KILL 55 "$B/tests/cuda/$t" > "$O/$t.log" 2>&1; echo "rc=$? ($t)" >> "$O/$t.log") &
    pids="$pids $!"
done
m=/tmp/q30b.gguf
step 40 "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b \
    --fill pool --threads "$(nproc)" -q -o $m
wait $pids # the tests' pids only (a bare wait also waits for the log's tee)
for t in $tests; do
    say "$t: $(grep -E '^[0-9]+%: Checks' "$O/$t.log" | tail -1) $(tail -1 "$O/$t.log")"
done
grep -h "^expert pairs" "$O/check_cuda_fused.log" | head -40
grep -h ":F:\|:E:" "$O"/check_cuda_*.log | head -20
[ -f $m ] || exit 1
prof() { # NAME PROFILER LIMIT FLAGS...
    name=$1 pr=$2 lim=$3
    shift 3
    step "$lim" "guild-cuda-prof $name: $*" sh -c '"$0" "$@" > "'"$O/prof-$name.txt"'" 2>&1; st=$?;
        sed -n "/^step clock/,\$p" "'"$O/prof-$name.txt"'"; exit $st' \
        "$pr" -m $m --steps 32 --threads 14 --populate 512 "$@"
}
bench() { # NAME BINDIR LIMIT FLAGS...
    name=$1 dir=$2 lim=$3
    shift 3
    step "$lim" "bench run $name: $*" sh -c '"$0" "$@" > "'"$O/$name.out"'" 2>&1; st=$?;
        grep -i "decode" "'"$O/$name.out"'" | tail -5; exit $st' \
        "$dir/guild" bench run -m $m --populate 512 --gen 64 --runs 3 --threads 14 --json "$O/$name.json" "$@"
}
prof phases-new "$B/bench/guild-cuda-prof" 17 --no-trace --phases
bench allgpu-new "$B" 27 --single-process --commit "$commit"
bench allgpu-base "$P/base" 27 --single-process --commit "$base_commit"
for i in $(seq 1 40); do printf 'one two three four five, '; done > /tmp/rep.txt
greedy() { # NAME BINDIR LIMIT
    name=$1 dir=$2 lim=$3
    step "$lim" "guild run $name" sh -c '"$0" "$@" > /dev/null 2> "'"$O/$name.log"'"; st=$?;
        grep "decode:\|prefill:" "'"$O/$name.log"'"; exit $st' \
        "$dir/guild" run -m $m -f /tmp/rep.txt -n 64 --temp 0 --ignore-eos --threads 14 --ctx 1024 \
        --backend cuda --single-process --ids-out "$O/$name.ids"
}
[ -n "$quick" ] || greedy ids-new "$B" 14
[ -n "$quick" ] || greedy ids-base "$P/base" 14
[ -s "$O/ids-new.ids" ] && [ -s "$O/ids-base.ids" ] &&
    { cmp -s "$O/ids-new.ids" "$O/ids-base.ids" && say "greedy ids: new = base" || say "greedy ids DIFFER"; }
[ -n "$quick" ] || prof phases-base "$P/base/guild-cuda-prof" 17 --no-trace --phases
tar -czf "$R/experts2-files.tar.gz" -C "$O" .
say done
