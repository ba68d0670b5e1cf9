#!/usr/bin/env bash
# Session 58's fifth call (pack in $C, bench/device/pack-xz.sh; main's build only):
#   C=/tmp/c bash bench/device/s58e.sh [SECONDS]
# Calls 1-4 (bench/results/attn58-h100-2026-12-06-s58.md) found that issue 17's step, at 512 populated positions and
# 64 generated, runs its attention at 513-576 keys, where every split of the decode attention has a second tile
# (~0.9 us a launch alone). This call measures main's step itself at other contexts: the pipeline's GPU worker
# traced, every expert on the GPU, at 448 populated positions (449-512 keys: one tile a split), 512 (the issue's),
# 1,024 (1,025-1,088 keys: three tiles a split), in turns, twice.
# Output under $OUT: s58e.log and s58e-files.tar.gz.
set -u
budget=${1:-300}
. bench/device/lib.sh
begin_bare s58e
ctx_trace() { # POPULATE TAG: lib.sh pipe_trace's two steps at another populated context
    f=$O/trace-gpu-$2.trace
    step 60 "pipeline trace, gpu, populate $1 ($2)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:" | tail -n 2' \
        "$B/guild" bench run -m "$m" --populate "$1" --runs 1 --gen 64 --gpu-prof "$f"
    step 30 "guild bench trace ($2)" sh -c '"$0" bench trace "$1" --skip 16 > "$2" 2>&1; st=$?;
        grep -E "GPU busy|busy a layer|^(router|rmsnorm_cl|matmul_q_split|attn_decode|qk_prep)" "$2" | head -n 12;
        exit $st' "$B/guild" "$f" "$O/trace-gpu-$2.txt"
    rm -f "$f"
}
for turn in 1 2; do
    ctx_trace 448 "p448-$turn"
    ctx_trace 512 "p512-$turn"
    ctx_trace 1024 "p1024-$turn"
done
rm -f "$m"
finish s58e
