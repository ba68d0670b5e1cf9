#!/usr/bin/env bash
# Issue 17's idle gap in the decode step (session 26): the step clock of this build (guild-cuda-prof --phases:
# host times around the graph's launch, device time between marks after the embedding, layer 0, the last layer
# and the LM head, all without CUPTI), beside the CUPTI profiles and the decode rates of this build and of a
# baseline, in one call. The most telling first, every step budgeted:
#   - the CUDA tests of the step (check_cuda_fused, _backend, _finite, _clock) beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - guild-cuda-prof --phases --no-trace: where an untraced decode step's time goes (this build);
#   - guild-cuda-prof --no-trace of the baseline: its untraced forward call;
#   - `guild bench run` decode, all on the GPU, medians of 3: this build, the baseline, the baseline with
#     --check-finite off (no memset node in its graph);
#   - guild-cuda-prof (CUPTI) of both builds: the idle column before each kernel (this build with --phases too);
#   - guild-cuda-prof --phases --no-trace --check-finite off and --cuda-off pdl (this build);
#   - greedy ids of both builds on a repetitive prompt (64 tokens, all on the GPU): equal;
#   - `guild bench run` with the multi-process pipeline at --gpu-mem 8G: this build, the baseline.
# Run from the repo root:  bash bench/device/stepgap.sh [SECONDS]
# with the pack in $C/c.tar.xz (default .carry-stepgap): bin/ (guild, the workers, tools/guild-mkmodel,
# bench/guild-cuda-prof, tests/cuda/check_cuda_{fused,backend,finite,clock}), lib/, COMMIT, and base/ (the
# baseline's guild, workers and guild-cuda-prof) with BASE_COMMIT. Output: $OUT/stepgap.log and
# $OUT/stepgap-files.tar.gz (the tests' logs, prof-*.txt, the runs' output and JSON, the ids).
set -u
budget=${1:-175}
C=${C:-$PWD/.carry-stepgap}
P=/tmp/guild-stepgap
mkdir -p $P && tar -C $P -xJf "$C/c.tar.xz"
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
R=${OUT:-/tmp/guild-out} # what comes back: the log and one tarball of the rest (a call returns 8 files at most)
O=/tmp/guild-stepgap-out
mkdir -p "$R" "$O"
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$P/base/BASE_COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$R/stepgap.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
pids=
for t in check_cuda_fused check_cuda_backend check_cuda_finite check_cuda_clock; do
    (timeout -s KILL 50 "$B/tests/cuda/$t" > "$O/$t.log" 2>&1; echo "rc=$? ($t)" >> "$O/$t.log") &
    pids="$pids $!"
done
m=/tmp/q30b.gguf
step 40 "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b \
    --fill pool --threads "$(nproc)" -q -o $m
wait $pids # the tests' pids only (a bare wait also waits for the log's tee)
for t in check_cuda_fused check_cuda_backend check_cuda_finite check_cuda_clock; do
    say "$t: $(grep -E '^[0-9]+%: Checks' "$O/$t.log" | tail -1) $(tail -1 "$O/$t.log")"
done
[ -f $m ] || exit 1
prof() { # NAME PROFILER LIMIT FLAGS...
    name=$1 pr=$2 lim=$3
    shift 3
    step "$lim" "guild-cuda-prof $name: $*" sh -c '"$0" "$@" > "'"$O/prof-$name.txt"'" 2>&1; st=$?;
        sed -n "/^step wall/,\$p" "'"$O/prof-$name.txt"'" | grep -v "^  *[0-9a-z_]*<\|^[a-z_]*_kernel" ; exit $st' \
        "$pr" -m $m --steps 32 --threads 14 --populate 512 "$@"
}
bench() { # NAME BINDIR LIMIT FLAGS...
    name=$1 dir=$2 lim=$3
    shift 3
    step "$lim" "bench run $name: $*" sh -c '"$0" "$@" > "'"$O/$name.out"'" 2>&1; st=$?;
        grep -i "decode" "'"$O/$name.out"'" | tail -4; exit $st' \
        "$dir/guild" bench run -m $m --populate 512 --gen 32 --runs 3 --json "$O/$name.json" "$@"
}
prof phases-new "$B/bench/guild-cuda-prof" 20 --no-trace --phases
prof untraced-base "$P/base/guild-cuda-prof" 18 --no-trace
bench allgpu-new "$B" 24 --single-process --commit "$commit"
bench allgpu-base "$P/base" 24 --single-process --commit "$base_commit"
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
bench allgpu-base-nofinite "$P/base" 24 --single-process --check-finite off --commit "$base_commit"
prof cupti-new "$B/bench/guild-cuda-prof" 20 --phases
prof cupti-base "$P/base/guild-cuda-prof" 20
grep -E "rmsnorm_kernel<true, 0, 3>|get_rows|finite_reset|clock_mark" "$O/prof-cupti-new.txt" "$O/prof-cupti-base.txt"
prof phases-new-nofinite "$B/bench/guild-cuda-prof" 18 --no-trace --phases --check-finite off
prof phases-new-nopdl "$B/bench/guild-cuda-prof" 18 --no-trace --phases --cuda-off pdl
bench pipe8g-new "$B" 30 --gpu-mem 8G --threads 14 --commit "$commit"
bench pipe8g-base "$P/base" 30 --gpu-mem 8G --threads 14 --commit "$base_commit"
tar -czf "$R/stepgap-files.tar.gz" -C "$O" .
say done
