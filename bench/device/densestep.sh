#!/usr/bin/env bash
# Issue 17's decode step, this build against a baseline in one call (session 25): the CUDA tests of the step
# (check_cuda_fused with its timing of a decode step's routed experts, check_cuda_kernels, check_cuda_backend) beside
# guild-mkmodel's Qwen3-30B-A3B shape, then, the most telling first should the budget run out:
#   - `guild bench run` decode, medians of 3, all on the GPU: this build, then the baseline;
#   - bench/guild-cuda-prof (CUPTI) of a decode step: this build, then the baseline's profiler;
#   - guild-cuda-prof --verify 1,2,4,8 (a verify step of K rows against one decode step): all on the GPU, then with
#     the experts in RAM (--gpu-experts none);
#   - greedy ids of both builds on a repetitive prompt (64 tokens, all on the GPU): equal.
# Run from the repo root:
#   bash bench/device/densestep.sh [SECONDS]
# with the pack in $C/c.tar.xz (default .carry-densestep): bin/ (guild, the workers, tools/guild-mkmodel,
# bench/guild-cuda-prof, tests/cuda/check_cuda_{fused,kernels,backend}), lib/, COMMIT, and base/ (the baseline's
# guild, guild-cpu-worker, guild-gpu-worker, guild-cuda-prof) with BASE_COMMIT. Every step runs under
# `timeout -s KILL` and is skipped past the budget; output: $OUT/densestep.log, the tests' logs, prof-*.txt,
# verify-*.txt, the runs' JSON and ids.
set -u
budget=${1:-175}
C=${C:-$PWD/.carry-densestep}
P=/tmp/guild-densestep
mkdir -p $P && tar -C $P -xJf "$C/c.tar.xz"
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$P/BASE_COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/densestep.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
# the tests on the GPU while the model is written on the CPUs
pids=
for t in check_cuda_fused check_cuda_kernels check_cuda_backend; do
    (timeout -s KILL 70 "$B/tests/cuda/$t" > "$O/$t.log" 2>&1; echo "rc=$? ($t)" >> "$O/$t.log") &
    pids="$pids $!"
done
m=/tmp/q30b.gguf
step 40 "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b \
    --fill pool --threads "$(nproc)" -q -o $m
# the tests' pids only: a bare `wait` also waits for the tee of the log's process substitution, which never ends
# (session 25's first call waited there until its limit)
wait $pids
for t in check_cuda_fused check_cuda_kernels check_cuda_backend; do
    say "$t: $(grep -E '^[0-9]+%: Checks' "$O/$t.log" | tail -1) $(tail -1 "$O/$t.log")"
done
grep -E '^time:|^expert pairs|^attention, merge' "$O/check_cuda_fused.log"
[ -f $m ] || exit 1
bin_of() { if [ "$1" = base ]; then echo "$P/base"; else echo "$B"; fi; }
commit_of() { if [ "$1" = base ]; then echo "$base_commit"; else echo "$commit"; fi; }
bench() { # NAME BUILD LIMIT FLAGS...
    name=$1 build=$2 lim=$3
    shift 3
    step "$lim" "bench run $name ($build): $*" sh -c '"$0" "$@" > "'"$O/$name.out"'" 2>&1; st=$?;
        grep -i "decode" "'"$O/$name.out"'" | tail -3; exit $st' \
        "$(bin_of "$build")/guild" bench run -m $m --populate 512 --gen 32 --runs 3 \
        --commit "$(commit_of "$build")" --json "$O/$name.json" "$@"
}
bench allgpu-new new 24 --single-process
bench allgpu-base base 24 --single-process
prof() { # NAME PROFILER LIMIT FLAGS...
    name=$1 pr=$2 lim=$3
    shift 3
    step "$lim" "guild-cuda-prof $name: $*" sh -c '"$0" "$@" > "'"$O/prof-$name.txt"'" 2>&1; st=$?;
        sed -n "/^step wall/,/^backend:/p" "'"$O/prof-$name.txt"'"; exit $st' \
        "$pr" -m $m --steps 32 --threads 14 --populate 512 "$@"
}
prof new "$B/bench/guild-cuda-prof" 22
prof base "$P/base/guild-cuda-prof" 22
verify() { # NAME LIMIT FLAGS...
    name=$1 lim=$2
    shift 2
    step "$lim" "guild-cuda-prof --verify $name: $*" sh -c '"$0" "$@" > "'"$O/verify-$name.txt"'" 2>&1; st=$?;
        grep "^verify" "'"$O/verify-$name.txt"'"; exit $st' \
        "$B/bench/guild-cuda-prof" -m $m --steps 16 --threads 14 --populate 512 --verify 1,2,4,8 "$@"
}
verify gpu 26
verify ram 32 --gpu-experts none
for i in $(seq 1 40); do printf 'one two three four five, '; done > /tmp/rep.txt
greedy() { # NAME BUILD LIMIT FLAGS...
    name=$1 build=$2 lim=$3
    shift 3
    step "$lim" "guild run $name ($build): $*" sh -c '"$0" "$@" > /dev/null 2> "'"$O/$name.log"'"; st=$?;
        grep "decode:\|prefill:" "'"$O/$name.log"'"; exit $st' \
        "$(bin_of "$build")/guild" run -m $m -f /tmp/rep.txt -n 64 --temp 0 --ignore-eos --threads 14 --ctx 1024 \
        --backend cuda --single-process --ids-out "$O/$name.ids" "$@"
}
greedy ids-new new 16
greedy ids-base base 16
[ -s "$O/ids-new.ids" ] && [ -s "$O/ids-base.ids" ] &&
    { cmp -s "$O/ids-new.ids" "$O/ids-base.ids" && say "greedy ids: new = base" || say "greedy ids DIFFER"; }
say done
