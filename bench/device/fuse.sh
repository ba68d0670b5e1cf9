#!/usr/bin/env bash
# Issue 17's shorter dense step on the device in one call, an A/B of the decode step's kernels: the fused block
# norm's bit checks (tests/cuda/check_cuda_fused), a Qwen3-30B-A3B-shaped model by guild-mkmodel --fill pool, then
# for this build and the baseline: bench/guild-cuda-prof (CUPTI) all on the GPU at 512 positions (per-kernel time
# of a decode step), `guild bench run` decode all on the GPU (--single-process) and with the experts in RAM
# (--gpu-experts none, one CPU worker of 14 threads), medians of 3; last, greedy ids of both builds compared
# (`guild run`, all on the GPU). Run from the repo root:
#   bash bench/device/fuse.sh [SECONDS]
# with the pack in $C/carry.tar.xz (default .carry-fuse): a .carry folder holding bin/ (guild, the workers,
# tools/guild-mkmodel, tests/cuda/check_cuda_fused, bench/guild-cuda-prof), lib/
# (bench/device/pack.sh's libraries, libcupti among them), COMMIT, and base/ with the baseline's guild,
# guild-cpu-worker, guild-gpu-worker and guild-cuda-prof and BASE_COMMIT. Every step runs under `timeout -s KILL`
# and is skipped past the budget; output: $OUT/fuse.log, $OUT/prof-*.txt and the runs' JSON.
set -u
budget=${1:-130}
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
step 30 check_cuda_fused "$B/tests/cuda/check_cuda_fused"
m=/tmp/q30b.gguf
step 40 "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b \
    --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || exit 1
bin_of() { if [ "$1" = base ]; then echo "$P/base"; else echo "$B"; fi; }
commit_of() { if [ "$1" = base ]; then echo "$base_commit"; else echo "$commit"; fi; }
for build in new base; do # the most telling first, should the budget run out
    prof=$P/base/guild-cuda-prof
    [ $build = new ] && prof=$B/bench/guild-cuda-prof
    step 25 "guild-cuda-prof $build" sh -c '"$0" "$@" > "'"$O/prof-$build.txt"'"; st=$?;
        sed -n "/^step wall/,/^kernel /p" "'"$O/prof-$build.txt"'"; exit $st' \
        "$prof" -m $m --steps 32 --threads 14 --populate 512
done
for build in new base; do
    step 25 "bench run all-gpu $build" "$(bin_of $build)/guild" bench run -m $m --populate 512 --gen 32 --runs 3 \
        --single-process --commit "$(commit_of $build)" --json "$O/allgpu-$build.json"
done
for build in new base; do
    step 35 "bench run gpu-experts none $build" "$(bin_of $build)/guild" bench run -m $m --populate 512 --gen 32 \
        --runs 3 --gpu-experts none --threads 14 --commit "$(commit_of $build)" --json "$O/ram-$build.json"
done
for build in new base; do
    step 15 "guild run greedy ids $build" sh -c '"$0" "$@" > /dev/null 2> "'"$O/ids-$build.log"'"' \
        "$(bin_of $build)/guild" run -m $m -p "The quick brown fox jumps over the lazy dog. Then" -n 32 --temp 0 \
        --ignore-eos --single-process --backend cuda --ids-out "$O/ids-$build.txt"
done
[ -s "$O/ids-new.txt" ] && [ -s "$O/ids-base.txt" ] &&
    { cmp -s "$O/ids-new.txt" "$O/ids-base.txt" && say "greedy ids: new = base" || say "greedy ids DIFFER"; }
say done
