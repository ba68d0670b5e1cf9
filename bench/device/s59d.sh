#!/usr/bin/env bash
# Session 59's fourth call (pack in $C, bench/device/pack-xz.sh: new = the pair path with its loads in one copy each
# part and the output's quantize out of line, var = main with the quantize out of line, base = main's build):
#   C=/tmp/c bash bench/device/s59d.sh [SECONDS]
# Calls 2-3: the pair path's phases after the keys grow in the step (->end 1.82-1.87 us against 0.61), and alone
# with cold code (--cold: ->end 0.90-0.96 against main's 0.58-0.61), even at 512 keys where it runs main's path: its
# code (106 KB against main's 86 KB, the early loads unrolled in six copies) is the suspect. new has main's size
# (86 KB); var tells whether main's own kernel gains from the one copy of its quantize.
# Alone at 576 keys (plain, --cold); the step in turns (new, base, var, twice); the step's attention phases;
# alltests.sh on new; all-GPU decode (new, base, var).
# Output under $OUT: s59d.log and s59d-files.tar.gz.
set -u
budget=${1:-400}
. bench/device/lib.sh
begin_bare s59d
attn_tl "576" new var base
for side in new var base; do
    grep_step 40 "cuda_attn_time --cold --timeline 512 576 ($side)" "^timeline" "$O/attn-tl-cold-$side.txt" \
        "$(cuda_tool "$side" cuda_attn_time)" --cold --timeline 512 576
done
for side in new base var new2 base2 var2; do pipe_trace gpu "$side"; done
step_tl attn new var base
alltests_new
decode_ab gpu new base var
rm -f "$m"
finish s59d
