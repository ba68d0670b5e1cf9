#!/usr/bin/env bash
# Session 59's second call (pack in $C, bench/device/pack-xz.sh: new = the pair path with P in stage 0's K rows,
# var = that without the second tile's rows asked for before the wait, varb = new without its trigger after the keys
# (the output product's blocks launched as its blocks end), base = main's build):
#   C=/tmp/c bash bench/device/s59b.sh [SECONDS]
# Call 1 (s59a.sh): the pair path was 0.46 us faster alone at 576 keys and 1.7 us slower in the step (its entry, merge
# and end phases longer; 4 KB more shared memory a block for P). Here P goes into stage 0's K rows (the layout as
# main's), with (new) and without (var) the early loads of the second tile; varb: is it the output product's blocks,
# launched sooner after the shorter keys, that slow the rest of the attention in the step?
# Alone at 576 and 1,024 keys; the step in turns (new, base, var, varb, twice); the step's attention phases; alltests.sh on
# new; all-GPU decode (new, base, var).
# Output under $OUT: s59b.log and s59b-files.tar.gz.
set -u
budget=${1:-420}
. bench/device/lib.sh
begin_bare s59b
attn_tl "576 1024" new var varb base
for side in new base var varb new2 base2 var2 varb2; do pipe_trace gpu "$side"; done
step_tl attn new var varb base
alltests_new
decode_ab gpu new base var
rm -f "$m"
finish s59b
