#!/usr/bin/env bash
# Issue 17's dense decode step, session 28 (router): this build against a baseline in one call, the most telling
# first, every step budgeted:
#   - the CUDA tests of what changed (check_cuda_fused: the fused router's rank choice and register-held rows =
#     the separate product and top-k, the FFN norm in the router's launch = add + rmsnorm + fused router, and the
#     backend fused = unfused; _kernels: the norms; _backend: the CUDA backend = the CPU's; _seq; _clock: every span
#     of a step still known) beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - guild-cuda-prof --phases --no-trace of both builds: the untraced step clock;
#   - `guild bench run --populate 512 --gen 64 --runs 3 --single-process` of both builds, all on the GPU;
#   - greedy ids of both builds on a repetitive prompt (64 tokens, all on the GPU): equal.
# Run from the repo root:  bash bench/device/router.sh [SECONDS]
# with the pack in $C/c.tar.xz (default .carry-router): bin/ (guild, the workers, tools/guild-mkmodel,
# bench/guild-cuda-prof, tests/cuda/check_cuda_*), lib/, COMMIT, and base/ (the baseline's guild, workers and
# guild-cuda-prof) with BASE_COMMIT. Output: $OUT/router.log and $OUT/router-files.tar.gz (the tests' logs,
# prof-*.txt, the runs' output and JSON, the ids).
set -u
budget=${1:-122}
C=${C:-$PWD/.carry-router}
P=/tmp/guild-router
mkdir -p $P && tar -C $P -xJf "$C/c.tar.xz"
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-router-out
mkdir -p "$R" "$O"
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$P/BASE_COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$R/router.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
tests="check_cuda_fused check_cuda_kernels check_cuda_backend check_cuda_seq check_cuda_clock"
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
grep -h "router fused" "$O/check_cuda_fused.log" | head -80
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
        "$dir/guild" bench run -m $m --populate 512 --gen 64 --runs 3 --json "$O/$name.json" "$@"
}
prof phases-new "$B/bench/guild-cuda-prof" 17 --no-trace --phases
prof phases-base "$P/base/guild-cuda-prof" 17 --no-trace --phases
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
greedy ids-new "$B" 14
greedy ids-base "$P/base" 14
[ -s "$O/ids-new.ids" ] && [ -s "$O/ids-base.ids" ] &&
    { cmp -s "$O/ids-new.ids" "$O/ids-base.ids" && say "greedy ids: new = base" || say "greedy ids DIFFER"; }
tar -czf "$R/router-files.tar.gz" -C "$O" .
say done
