#!/usr/bin/env bash
# Session 33 (issues 17, 18): issue 17's own measure, the GPU's time a layer in a decode step with every expert in
# RAM (the step the issue's 73 us a layer was measured on), and issue 18's 8 and 16 sessions with more paired runs.
# 1. guild-cuda-prof --gpu-experts none: the step clock (--phases --no-trace) and the CUPTI trace (per kernel);
# 2. guild bench sessions 1,8,16 at --gpu-mem 8G (1: the limit's dense step), 10 timed runs a size, each between
#    DRAM probes (bench/paired.h);
# 3. guild-cuda-prof --sessions 16 --gpu-mem 8G --phases --no-trace: the 16-row step's clock.
# Usage: C=/tmp/c bash bench/device/ramstep.sh [SECONDS] (the pack in $C: bin/, lib/, COMMIT). Output under $OUT:
# ramstep.log and ramstep-files.tar.gz.
set -u
# shellcheck disable=SC2034 # lib.sh's step reads t0 and budget
t0=$(date +%s) budget=${1:-280}
C=${C:-/tmp/c}
B=$C/bin
export LD_LIBRARY_PATH=$C/lib
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-ramstep-out
rm -rf "$O"
mkdir -p "$R" "$O"
exec > >(tee -a "$R/ramstep.log") 2>&1
. bench/device/lib.sh # say, step, prof
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit"
m=/tmp/q30b.gguf
step 90 "guild-mkmodel" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || { say "no model"; tar -czf "$R/ramstep-files.tar.gz" -C "$O" .; exit 1; }
prof ram-phases --gpu-experts none --phases --no-trace
prof ram-cupti --gpu-experts none
step 120 "guild bench sessions 1,8,16 --repeat 10" sh -c '"$0" "$@" > "'"$O/sessions.out"'" 2>&1; st=$?;
    sed -n "/^# paired: each/,\$p" "'"$O/sessions.out"'"; exit $st' "$B/guild" bench sessions -m $m \
    --gpu-mem 8G --threads 14 --sessions 1,8,16 --prompt 128 --gen 16 --repeat 10 --probes 1 \
    --commit "$commit" --json "$O/sessions.json"
prof s16-phases --sessions 16 --gpu-mem 8G --phases --no-trace
rm -f $m
tar -czf "$R/ramstep-files.tar.gz" -C "$O" .
say "ramstep done"
