#!/usr/bin/env bash
# Session 39's call (issue 18): more paired runs of session 38's closing build against main 7abef70, pooled with
# that call's (the same two commits), from the repo root with session 38's pack unpacked in $C:
#   C=/tmp/c bash bench/device/sess39.sh [SECONDS] [REPEAT] [ROUNDS]
# 1. guild-mkmodel writes the Qwen3-30B-A3B shape;
# 2. ROUNDS rounds of lib.sh's sessions8 (1, 2, 4, 8, 16 sessions at 8G), new then base;
# 3. `guild bench pool` for each build: this call's files alone, then with session 38's call 2
#    (bench/results/sess38-h200-2026-12-04-s38/call2/sessions-*.json).
# Output under $OUT: sess39.log and sess39-files.tar.gz.
set -u
budget=${1:-330}
repeat=${2:-5}
rounds=${3:-4}
. bench/device/lib.sh # say, step, setup, finish, sessions8
setup sess39
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish sess39; exit 1; }
for r in $(seq 1 "$rounds"); do
    sessions8 "new-$r" "$B" "$commit" "$repeat"
    sessions8 "base-$r" "$BASE" "$base_commit" "$repeat"
done
prev=bench/results/sess38-h200-2026-12-04-s38/call2
for side in new base; do
    here=$(ls "$O"/sessions-$side-*.json 2> /dev/null)
    step 15 "guild bench pool ($side, this call)" sh -c '"$0" "$@" 2>&1 | tail -n 8' "$B/guild" bench pool $here
    step 15 "guild bench pool ($side, with session 38's call 2)" sh -c '"$0" "$@" 2>&1 | tail -n 8' \
        "$B/guild" bench pool $here $prev/sessions-$side-*.json
done
rm -f $m
finish sess39
