#!/usr/bin/env bash
# Session 58's second call (pack in $C, bench/device/pack-xz.sh; base: main's build at fa8c2d2 in $C/base):
#   C=/tmp/c bash bench/device/s58b.sh [SECONDS]
# s58a found the attention's tile->keys phase 1.89 us in the all-GPU step against 1.06 alone at 512 keys, the
# instruction caches not the cause (--cold against --warm: the same phases). The step decodes at 513-576 keys, and
# with clusters of 8 blocks every split then holds 65-72 keys: two tiles (session 54: a second tile costs ~0.8 us
# whatever it holds). new: clusters of 16 blocks (branch s58-cl16), one tile a split up to 1,024 keys.
# 1. the attention alone, its phases at 512, 576 and 1,000 keys (cuda_attn_time --timeline), new and base;
# 2. the pipeline's GPU worker traced, every expert on the GPU, new and base in turns (new, base, new2, base2);
# 3. the attention's phases in the all-GPU step (guild-cuda-prof --timeline attn), new and base;
# 4. alltests.sh on new; 5. all-GPU decode at 512 positions (new, base, new2, base2).
# Output under $OUT: s58b.log, alltests.log and s58b-files.tar.gz.
set -u
budget=${1:-400}
. bench/device/lib.sh
attn_ab s58b "512 576 1000"
