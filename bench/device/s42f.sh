#!/usr/bin/env bash
# Session 42's sixth call: s42e's build with the Q/K preparation's new-key slots cut from 16 rows to 8
# (CUDA_ATTN_PREP_ROWS), so that the launch's shared memory (28.8 KB) stays under 32 KB as the plain launch's
# (20.6 KB) does: does the +2.3 us of s42d/s42e come from a larger shared-memory carveout? Pack as s42e's:
#   C=/tmp/c bash bench/device/s42f.sh [SECONDS]
# guild-cuda-prof --gpu-experts none and all-GPU decode at 512, new and base in turns.
# Output under $OUT: s42f.log and s42f-files.tar.gz.
# Build: branch s42-prep at 5b8447a (not landed).
set -u
budget=${1:-150}
. bench/device/lib.sh # say, step, setup, finish, bin_of, prof_ab, decode_ab
setup s42f
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s42f; exit 1; }
prof_ab new base new2 base2
decode_ab gpu new base
rm -f $m
finish s42f
