#!/usr/bin/env bash
# Session 41's fourth call: issue 18's sessions measure on the build with the short-span split rule (16 rows at
# 128-160 keys take 32-key splits now), against main 0296343, two rounds in turns. Pack in $C: bin/ (the build),
# base/ (main 0296343's guild and workers):
#   C=/tmp/c bash bench/device/s41d.sh [SECONDS]
# Output under $OUT: s41d.log and s41d-files.tar.gz (sessions-*.txt and .json).
set -u
budget=${1:-300}
. bench/device/lib.sh # say, step, setup, finish, sessions8
setup s41d
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s41d; exit 1; }
for r in 1 2; do
    sessions8 "new-$r" "$B" "$commit" 3
    sessions8 "base-$r" "$BASE" 0296343 3
done
rm -f $m
finish s41d
