#!/usr/bin/env bash
# Issue 17's expert prefetch (--prefetch-experts) on the device in one call: the CPU's caches (lscpu), a
# Qwen3-30B-A3B-shaped Q4_K_M model (guild-mkmodel --fill pool), then `guild bench run --populate 512 --gen 64
# --runs 3 --threads 14 --gpu-experts none` of the pack's build with the prefetch of 8 experts a token, off, with 2
# experts a token, then the baseline build (the pack's base/: bash bench/device/repack.sh --final BUILD BASE), or
# without one 4 experts a token.
# On the device, the pack unpacked in C (default /tmp/c):  C=/tmp/c bash prefetch.sh [SECONDS]
# Every step runs under `timeout -s KILL` and is skipped when it would not fit. Output: $OUT/prefetch.log + JSON.
set -u
budget=${1:-165}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=$C/base
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/prefetch.log") 2>&1
t0=$(date +%s)
say() { echo "== $(date -u +%T) +$(($(date +%s) - t0))s $*"; }
step() { # LIMIT NAME CMD...
    lim=$1 name=$2
    shift 2
    if [ $(($(date +%s) - t0 + lim)) -gt "$budget" ]; then
        say "skipped (needs $lim s): $name"
        return 0
    fi
    say "$name"
    timeout -s KILL "$lim" "$@"
    echo "rc=$? ($name)"
}
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
lscpu
lscpu -C 2> /dev/null || grep . /sys/devices/system/cpu/cpu0/cache/index*/size
m=/tmp/q30b.gguf
step 45 "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool" \
    /usr/bin/time -f "mkmodel %e s" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
run() { # LIMIT NAME BIN COMMIT FLAGS...
    lim=$1 name=$2 bin=$3 c=$4
    shift 4
    step "$lim" "bench run $name: $*" sh -c '"$0" "$@" 2>&1 | grep -v "^guild: info: \(cpu\|gpu\)-worker"' \
        "$bin/guild" bench run -m $m --populate 512 --gen 64 --runs 3 --threads 14 --gpu-experts none \
        --commit "$c" --json "$O/q30b-$name.json" "$@"
}
if [ -f $m ]; then
    run 40 prefetch8 "$B" "$commit" --prefetch-experts 8
    run 40 off "$B" "$commit"
    run 40 prefetch2 "$B" "$commit" --prefetch-experts 2
    if [ -x "$BASE/guild" ]; then
        run 40 base "$BASE" "$base_commit"
    else
        run 40 prefetch4 "$B" "$commit" --prefetch-experts 4
    fi
fi
say done
