#!/usr/bin/env bash
# Issue 17's shorter dense step on the device in one call: the fused launches' bit checks
# (tests/cuda/check_cuda_fused), a Qwen3-30B-A3B-shaped model by guild-mkmodel --fill pool, then, the most telling
# first should the budget run out:
#   - greedy decode (`guild run` on a repetitive prompt, 64 tokens) of this build and the baseline, all on the GPU
#     (single process) and with the experts in RAM (--gpu-experts none, the pipeline): equal ids, decode rates;
#   - guild-cuda-prof --verify 1,2,4,8: a verify step of K rows against one decode step, all on the GPU;
#   - this build's `guild run --spec ngram` (ids = the baseline's plain decode; its acceptance);
#   - `guild bench run` decode, medians of 3, both builds; bench/guild-cuda-prof (CUPTI) of this build's step;
#     the verify steps with the experts in RAM; --cuda-off pdl / fuse; --spec ngram with the experts in RAM.
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
base_commit=${BASE_COMMIT:-$(cat "$P/BASE_COMMIT" 2> /dev/null || echo unknown)} # the environment's, if given
exec > >(tee -a "$O/fuse.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
step 30 check_cuda_fused "$B/tests/cuda/check_cuda_fused"
m=/tmp/q30b.gguf
step 30 "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b \
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
# greedy decode of both builds, all on the GPU (single process) and with the experts in RAM (the pipeline): the
# ids must be equal, the decode rates are the A/B
greedy ids-gpu-new new 16 --single-process
greedy ids-gpu-base base 16 --single-process
greedy ids-ram-new new 22 --gpu-experts none
greedy ids-ram-base base 22 --gpu-experts none
for p in gpu ram; do
    [ -s "$O/ids-$p-new.ids" ] && [ -s "$O/ids-$p-base.ids" ] &&
        { cmp -s "$O/ids-$p-new.ids" "$O/ids-$p-base.ids" && say "greedy ids ($p): new = base" ||
            say "greedy ids ($p) DIFFER"; }
done
verify() { # NAME FLAGS...
    name=$1
    shift
    step 30 "guild-cuda-prof --verify $name: $*" sh -c '"$0" "$@" > "'"$O/verify-$name.txt"'"; st=$?;
        grep "^verify" "'"$O/verify-$name.txt"'"; exit $st' \
        "$B/bench/guild-cuda-prof" -m $m --steps 24 --threads 14 --populate 512 --verify 1,2,4,8 "$@"
}
verify gpu
greedy ngram-gpu-new new 18 --single-process --spec ngram --spec-max 4
[ -s "$O/ngram-gpu-new.ids" ] && [ -s "$O/ids-gpu-base.ids" ] &&
    { cmp -s "$O/ngram-gpu-new.ids" "$O/ids-gpu-base.ids" && say "greedy ids: new --spec ngram = base" ||
        say "greedy ids: new --spec ngram DIFFER from base"; }
bench allgpu-new new 22 --single-process
bench allgpu-base base 22 --single-process
step 22 "guild-cuda-prof new" sh -c '"$0" "$@" > "'"$O/prof-new.txt"'"; st=$?;
    sed -n "/^step wall/,/^backend:/p" "'"$O/prof-new.txt"'"; exit $st' \
    "$B/bench/guild-cuda-prof" -m $m --steps 32 --threads 14 --populate 512
verify ram --gpu-experts none
bench ram-new new 32 --gpu-experts none --threads 14
bench ram-base base 32 --gpu-experts none --threads 14
bench allgpu-nopdl new 22 --single-process --cuda-off pdl
bench allgpu-nofuse new 22 --single-process --cuda-off fuse
greedy ngram-ram-new new 30 --spec ngram --spec-max 4 --gpu-experts none
say done
