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
for turn in 1 2; do
    for pop in 448 512 1024; do pipe_trace gpu "p$pop-$turn" "$pop"; done
done
rm -f "$m"
finish s58e
