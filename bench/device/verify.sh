#!/usr/bin/env bash
# Issue 17's verify steps on the device in one call (bench/results/spec-verify-h200-*.md): the batch-invariance
# and speculative checks (tests/cuda/check_cuda_batch, tests/cuda/spec_cuda.sh; check_cuda_backend last), then a
# Qwen3-30B-A3B-shaped model by guild-mkmodel and `guild run` greedy on a repetitive prompt with experts in RAM
# (--gpu-experts none) and all on the GPU: --spec none (one decode step a token), the target as its own draft
# model on the GPU (--draft-backend cuda) at --spec-max 1, 3, 7 (every draft accepted: verify steps of exactly
# 2, 4, 8 rows; their time over the steps is a verify step's cost), and --spec ngram. Run from the repo root:
#   bash bench/device/verify.sh [SECONDS]
# with the pack (repack.sh BUILD_DIR, then `tar -cJf carry.tar.xz .carry`) in $C/carry.tar.xz (default
# .carry-verify). Every step runs under `timeout -s KILL`; output: $OUT/*.log, the ids and a summary.
set -u
budget=${1:-260}
C=${C:-$PWD/.carry-verify}
P=/tmp/guild-verify/.carry
mkdir -p /tmp/guild-verify && tar -C /tmp/guild-verify -xJf "$C/carry.tar.xz"
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/verify.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit"
step 100 check_cuda_batch "$B/tests/cuda/check_cuda_batch"
step 60 spec_cuda.sh env GUILD_BUILDDIR="$B" sh tests/cuda/spec_cuda.sh

m=/tmp/q30b.gguf
step 60 "model: Qwen3-30B-A3B shape, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
for i in $(seq 1 40); do printf 'one two three four five, '; done > /tmp/rep.txt
run() { # NAME FLAGS...
    name=$1
    shift
    step 30 "guild run $name: $*" sh -c '"$0" "$@" > /dev/null 2> "'"$O/$name.log"'"; st=$?;
        grep "decode:\|speculative:\|prefill:" "'"$O/$name.log"'"; exit $st' \
        "$B/guild" run -m $m -f /tmp/rep.txt -n 96 --temp 0 --ignore-eos --threads 14 --ctx 1024 --backend cuda \
        --ids-out "$O/$name.ids" "$@"
}
if [ -f $m ]; then
    ram="--gpu-experts none"
    self="--spec draft --draft-model $m --draft-backend cuda --spec-max"
    # the most telling first, should the budget run out: decode and verify steps of 4 rows in both placements
    run ram-none $ram
    run ram-self3 $ram $self 3
    run gpu-none
    run gpu-self3 $self 3
    for k in 1 7; do
        run ram-self$k $ram $self $k
        run gpu-self$k $self $k
    done
    run ram-ngram $ram --spec ngram --spec-max 4
    run gpu-ngram --spec ngram --spec-max 4
    for f in "$O"/*-self*.ids "$O"/*-ngram.ids; do
        [ -f "$f" ] || continue
        base=$(basename "$f" .ids)
        ref="$O/${base%%-*}-none.ids"
        cmp -s "$f" "$ref" && say "ids $base = ${base%%-*}-none" || say "ids $base DIFFER from ${base%%-*}-none"
    done
fi
step 45 check_cuda_backend env CK_DEFAULT_TIMEOUT=600 "$B/tests/cuda/check_cuda_backend"
say "done"
