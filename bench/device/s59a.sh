#!/usr/bin/env bash
# Session 59's first call (pack in $C, bench/device/pack-xz.sh: new = the pair path of the decode attention, base =
# main's build, var = main with the router's trigger after its writes):
#   C=/tmp/c bash bench/device/s59a.sh [SECONDS]
# new: attn_decode_cl_kernel takes a split of two tiles (65-128 keys: issue 17's step at 513-576 keys) as one tile
# of 128 keys in both stages (bench/results/attn58-h100-2026-12-06-s58.md: the second tile cost ~0.9 us a launch).
# var: the router's cluster form (not the publishing one) lets the experts' launch in only after its writes (session
# 58's branch s58-rtrig, prepared and not run).
# Alone at 512, 576 and 1,024 keys (new, base); the step in turns (new, base, var, twice); the step's attention
# phases (new, base); alltests.sh on new; all-GPU decode (new, base, var).
# Output under $OUT: s59a.log and s59a-files.tar.gz.
set -u
budget=${1:-560}
. bench/device/lib.sh
begin_bare s59a
attn_tl "512 576 1024" new base
for side in new base var new2 base2 var2; do pipe_trace gpu "$side"; done
step_tl attn new base
alltests_new
decode_ab gpu new base var
rm -f "$m"
finish s59a
