#!/usr/bin/env bash
# Session 48's second call (written in session 48, which had no device): where the router's and the attention's
# time goes inside the decode step, against the same kernels alone (issue 17: each is 1-1.5 us longer in the step
# than in a graph of its own launches). Pack as s48a.sh's.
#   C=/tmp/c bash bench/device/s48b.sh [SECONDS]
# 1. guild-cuda-prof --no-trace --timeline router and attn (cuda_timeline.h's stamps of each step's last layer):
#    experts in RAM (the host-driven step) and every expert on the GPU (one graph a step);
# 2. the same kernels alone: cuda_head_time --timeline 1 (the router), cuda_attn_time --timeline 512 (the
#    attention at 512 keys, 1, 4 and 16 rows).
# Output under $OUT: s48b.log and s48b-files.tar.gz.
set -u
budget=${1:-300}
. bench/device/lib.sh # setup, say, step, finish, timelines
setup s48b
m=/tmp/q30b.gguf
[ -f $m ] || step 40 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
timelines
rm -f $m
finish s48b
