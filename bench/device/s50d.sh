#!/usr/bin/env bash
# Session 50's fourth call: s50b's build (main's code) against main's 934f42a on the H200 kind, for numbers beside
# session 49's (s50a-c ran on H100s); no tests (they passed on the H100 in s50b and s50c).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-s50d
#   device: mkdir -p /tmp/c && tar -xJf .carry-s50d/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s50d.sh [SECONDS]
# 1. the pipeline's GPU worker traced with experts in RAM: new, base;
# 2. experts-in-RAM decode at 512 positions, new and base in turns, where time is left.
# Output under $OUT: s50d.log and s50d-files.tar.gz (the traces gzipped inside).
set -u
budget=${1:-590}
. bench/device/lib.sh # setup, step, finish, pipe_trace, decode_ab
setup s50d
m=/tmp/q30b.gguf
step 40 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
pipe_trace ram new
pipe_trace ram base
decode_ab ram new base new2 base2
rm -f $m
finish s50d
