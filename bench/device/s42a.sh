#!/usr/bin/env bash
# Session 42's first call: where issue 17's GPU time a layer goes, by kernel (guild-cuda-prof's busy column, which
# session 41 wrote and never ran on the device). Pack in $C: bin/ (guild-cuda-prof, guild-mkmodel):
#   C=/tmp/c bash bench/device/s42a.sh [SECONDS]
# On the Qwen3-30B-A3B-shaped file at 512 populated positions, experts in RAM (issue 17's measure):
# 1. guild-cuda-prof as issue 17 measures it (the busy column: what each launch adds to the busy union);
# 2. the same with programmatic dependent launch off (each kernel's duration without its wait for the one before);
# 3. the step clock's phases (--phases --no-trace), experts in RAM and all on the GPU.
# Output under $OUT: s42a.log and s42a-files.tar.gz (every report whole).
set -u
budget=${1:-200}
. bench/device/lib.sh # say, step, setup, finish
setup s42a
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s42a; exit 1; }
p=$B/bench/guild-cuda-prof
step 40 "prof: experts in RAM" sh -c '"$0" "$@" > "'"$O"'/prof-ram.txt" 2>&1; st=$?; cat "'"$O"'/prof-ram.txt"; exit $st' \
    "$p" -m $m --steps 32 --threads 14 --gpu-experts none
step 40 "prof: experts in RAM, no PDL" sh -c '"$0" "$@" > "'"$O"'/prof-ram-nopdl.txt" 2>&1; st=$?;
    cat "'"$O"'/prof-ram-nopdl.txt"; exit $st' "$p" -m $m --steps 32 --threads 14 --gpu-experts none --cuda-off pdl
step 40 "phases: experts in RAM" sh -c '"$0" "$@" > "'"$O"'/phases-ram.txt" 2>&1; st=$?; cat "'"$O"'/phases-ram.txt";
    exit $st' "$p" -m $m --steps 32 --threads 14 --gpu-experts none --phases --no-trace
step 40 "phases: all on the GPU" sh -c '"$0" "$@" > "'"$O"'/phases-gpu.txt" 2>&1; st=$?; cat "'"$O"'/phases-gpu.txt";
    exit $st' "$p" -m $m --steps 32 --threads 14 --phases --no-trace
rm -f $m
finish s42a
