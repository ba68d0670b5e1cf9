#!/usr/bin/env bash
# Session 27, lead: decode with every expert in RAM on main's tip (prefetch + fuse2) against the session's start,
# interleaved: new --prefetch-experts 4, base, new 0, new 4, base (Qwen3-30B-A3B shape, medians of 3 each).
set -u
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
t0=$(date +%s)
budget=190
. bench/device/lib.sh
say "pf: commit $(cat "$C/COMMIT") base $(cat "$C/BASE_COMMIT")"
m=/tmp/q30b.gguf
step 60 "mkmodel" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o $m
i=0
for cfg in new:4 base:x new:0 new:4 base:x; do
    i=$((i + 1))
    side=${cfg%%:*} n=${cfg##*:}
    bin=$C/bin
    extra="--prefetch-experts $n"
    [ $side = base ] && bin=$C/base && extra=""
    step 40 "$i $side $extra" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 |DRAM read|prefetch" | tail -n 9' \
        "$bin/guild" bench run -m $m --populate 512 --gen 64 --runs 3 --threads 14 --gpu-experts none $extra \
        --json "$O/r$i-$side-$n.json"
done
rm -f $m
say "pf done"
