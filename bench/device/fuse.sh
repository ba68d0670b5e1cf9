#!/usr/bin/env bash
# Issue 17's shorter dense step on the device in one call: the fused launches' bit checks
# (tests/cuda/check_cuda_fused), a Qwen3-30B-A3B-shaped model by guild-mkmodel --fill pool, then, the most telling
# first should the budget run out:
#   - `guild bench run` decode all on the GPU (--single-process), this build and the baseline, medians of 3;
#   - greedy ids: the baseline's `guild run` on a repetitive prompt, and this build's with `--spec ngram` (equal
#     ids: this build = the baseline, and the n-gram drafts' verify steps = plain decode), its acceptance;
#   - decode with the experts in RAM (--gpu-experts none, one CPU worker of 14 threads), both builds;
#   - bench/guild-cuda-prof (CUPTI) of this build's decode step (kernels, idle time before each);
#   - guild-cuda-prof --verify 1,2,4,8: a verify step of K rows against one decode step, all on the GPU and with
#     the experts in RAM (single process);
#   - this build with --cuda-off pdl and --cuda-off fuse (what each part gives), --spec ngram with experts in RAM.
# Run from the repo root:
#   bash bench/device/fuse.sh [SECONDS]
# with the pack in $C/carry.tar.xz (default .carry-fuse): a .carry folder holding bin/ (guild, the workers,
# tools/guild-mkmodel, tests/cuda/check_cuda_fused, bench/guild-cuda-prof), lib/ (bench/device/pack.sh's
# libraries, libcupti among them), COMMIT, and base/ with the baseline's guild, guild-cpu-worker and
# guild-gpu-worker and BASE_COMMIT. Every step runs under `timeout -s KILL` and is skipped past the budget;
# output: $OUT/fuse.log, $OUT/prof-new.txt, $OUT/verify-*.txt, the runs' JSON and the ids.
set -u
budget=${1:-175}
C=${C:-$PWD/.carry-fuse}
P=/tmp/guild-fuse/.carry
mkdir -p /tmp/guild-fuse && tar -C /tmp/guild-fuse -xJf "$C/carry.tar.xz"
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$P/BASE_COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/fuse.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
step 40 check_cuda_fused "$B/tests/cuda/check_cuda_fused"
m=/tmp/q30b.gguf
step 40 "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b \
    --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || exit 1
bin_of() { if [ "$1" = base ]; then echo "$P/base"; else echo "$B"; fi; }
commit_of() { if [ "$1" = base ]; then echo "$base_commit"; else echo "$commit"; fi; }
bench() { # NAME BUILD LIMIT FLAGS...
    name=$1 build=$2 lim=$3
    shift 3
    step "$lim" "bench run $name ($build): $*" "$(bin_of "$build")/guild" bench run -m $m --populate 512 --gen 32 \
        --runs 3 --commit "$(commit_of "$build")" --json "$O/$name.json" "$@"
}
for i in $(seq 1 40); do printf 'one two three four five, '; done > /tmp/rep.txt
greedy() { # NAME BUILD LIMIT FLAGS...
    name=$1 build=$2 lim=$3
    shift 3
    step "$lim" "guild run $name ($build): $*" sh -c '"$0" "$@" > /dev/null 2> "'"$O/$name.log"'"; st=$?;
        grep "decode:\|speculative:\|prefill:" "'"$O/$name.log"'"; exit $st' \
        "$(bin_of "$build")/guild" run -m $m -f /tmp/rep.txt -n 64 --temp 0 --ignore-eos --threads 14 --ctx 1024 \
        --backend cuda --ids-out "$O/$name.ids" "$@"
}
bench allgpu-new new 22 --single-process
bench allgpu-base base 22 --single-process
greedy ids-base base 22
greedy ngram-new new 22 --spec ngram --spec-max 4
[ -s "$O/ngram-new.ids" ] && [ -s "$O/ids-base.ids" ] &&
    { cmp -s "$O/ngram-new.ids" "$O/ids-base.ids" && say "greedy ids: new (--spec ngram) = base (--spec none)" ||
        say "greedy ids DIFFER"; }
bench ram-new new 32 --gpu-experts none --threads 14
bench ram-base base 32 --gpu-experts none --threads 14
step 22 "guild-cuda-prof new" sh -c '"$0" "$@" > "'"$O/prof-new.txt"'"; st=$?;
    sed -n "/^step wall/,/^backend:/p" "'"$O/prof-new.txt"'"; exit $st' \
    "$B/bench/guild-cuda-prof" -m $m --steps 32 --threads 14 --populate 512
verify() { # NAME FLAGS...
    name=$1
    shift
    step 30 "guild-cuda-prof --verify $name: $*" sh -c '"$0" "$@" > "'"$O/verify-$name.txt"'"; st=$?;
        grep "^verify" "'"$O/verify-$name.txt"'"; exit $st' \
        "$B/bench/guild-cuda-prof" -m $m --steps 24 --threads 14 --populate 512 --verify 1,2,4,8 "$@"
}
verify gpu
verify ram --gpu-experts none
bench allgpu-nopdl new 22 --single-process --cuda-off pdl
bench allgpu-nofuse new 22 --single-process --cuda-off fuse
greedy ngram-ram-new new 30 --spec ngram --spec-max 4 --gpu-experts none
say done
