#!/usr/bin/env bash
# Issue 17, session 67's fifth call: the router's tail in the step (ranks->end 1.38-1.46 us, 0.54 alone: call 4)
# with the experts' launch after the router's end instead of after its choice. new = main with the cluster router's
# pdl_trigger() after its ranks removed where it does not publish (branch s67-trigend), base = main (681adf2).
# Traces in turns (dense busy and the whole layer's busy, so that time moved into the experts shows), the router's
# phases on new, then all-GPU decode in each.
# Pack: PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager bench/guild-cuda-prof tools/guild-mkmodel" \
#       bash bench/device/pack-xz.sh WORKTREE OUT (with /tmp/p40/base)
# Run: mkdir -p /tmp/c && tar -xJf .carry-G/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s67e.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s67e
for side in new base new2 base2 new3 base3; do pipe_trace gpu "$side"; done
step_tl router new
decode_ab gpu new base
rm -f "$m"
finish s67e
