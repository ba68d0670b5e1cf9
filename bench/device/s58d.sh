#!/usr/bin/env bash
# Session 58's fourth call (pack in $C, bench/device/pack-xz.sh; base: main's build at fa8c2d2 in $C/base):
#   C=/tmp/c bash bench/device/s58d.sh [SECONDS]
# The step decodes at 513-576 keys, where each of the decode attention's 8 splits holds 65-72 keys: two 64-key tiles,
# the second holding 1-8 keys (s58a-c). Clusters of 16 and tiles of 128 keys were slower in the step (s58b, s58c).
# new (branch s58-skip): a tile's k-steps past its last key are skipped (the warps whose 16 keys are all past the
# split skip their score products, P V stops at the last k-step that holds a key, and no row past that k-step is
# loaded): the same bits, the short second tile's chain of products shorter.
# 1. the attention alone, its phases at 512, 576 and 1,000 keys (cuda_attn_time --timeline), new and base;
# 2. lib.sh turns_ab (new against base in turns, three times; then alltests.sh on new; then all-GPU decode);
# 3. the attention's phases in the all-GPU step (guild-cuda-prof --timeline attn), new and base.
# Output under $OUT: s58d.log, alltests.log and s58d-files.tar.gz.
set -u
budget=${1:-400}
. bench/device/lib.sh
begin_bare s58d
attn_tl "512 576 1000" new base
for side in new base new2 base2 new3 base3; do pipe_trace gpu "$side"; done
step_tl attn new base
alltests_new
decode_ab gpu new base new2 base2
rm -f "$m"
finish s58d
