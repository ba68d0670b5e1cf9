#!/usr/bin/env bash
# Issue 17, session 65's second call: after s64a.sh (the L2 streaming window on every weight launch: dense busy a
# layer 25.45/25.46 against base's 25.48/25.50, the windowed products slower, the unwindowed kernels faster), the
# window on the routed experts' launches alone (varb: bench/device/s63a/l2stream.patch with matmul.cu's mm_span and
# mm_multi_span empty), against base (main) and new (the whole patch), in turns; all-GPU decode of the three.
# Pack: PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager bench/guild-cuda-prof tools/guild-mkmodel" bash
#       bench/device/pack-xz.sh WORKTREE .carry-B with /tmp/p40/base and /tmp/p40/varb (flat).
# Run: mkdir -p /tmp/c && tar -xJf .carry-B/c.tar.xz -C /tmp/c &&
#      C=/tmp/c bash bench/device/s65a.sh [SECONDS]
set -u
budget=${1:-150}
. bench/device/lib.sh
begin_bare s65a
for side in varb base new varb2 base2 new2; do pipe_trace gpu "$side"; done
decode_ab gpu varb base new
rm -f "$m"
finish s65a
