#!/usr/bin/env bash
# Issue 17, session 67's second call: main's run-time switches of the dense step (--cuda-off PART) swept on main's
# build after the L2 windows (session 65) changed the step: each traced in turns against main itself, all experts
# on the GPU, populate 512. A switch whose part no longer pays would show as a shorter dense step with it off.
# Pack (base = main's programs, /tmp/p40/base with base/COMMIT; bin/ only guild-mkmodel):
#   PACK_FILES="tools/guild-mkmodel" bash bench/device/pack-xz.sh /work/main OUT
# Run: mkdir -p /tmp/c && tar -xJf .carry-D/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s67b.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s67b
parts="attn-early attn-prefetch attn-grid norm-cluster mm-split"
for turn in "" 2; do
    pipe_trace gpu "base$turn"
    for p in $parts; do pipe_trace gpu "base$turn+off-$p"; done
done
pipe_trace gpu base3
rm -f "$m"
finish s67b
