#!/usr/bin/env bash
# Session 51's fourth call: the fused norm's cluster form letting the next product launch after its row's loads (new),
# against 68fc3d2 without it (var: /tmp/p40/var when packed; call 3's new) and main's 4ef3493 (base).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s51d
#   device: mkdir -p /tmp/c && tar -xJf .carry-s51d/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s51d.sh [SECONDS]
# 1. bench/device/alltests.sh;
# 2. the pipeline's GPU worker traced with every expert on the GPU: new, var, base, in turns;
# 3. all-GPU decode at 512 positions: new, var, base, in turns;
# 4. the CPU worker's dense_turnaround_us: new, var, base.
# Output under $OUT: s51d.log, alltests.log and s51d-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s51d
pipe_trace gpu new
pipe_trace gpu var
pipe_trace gpu base
pipe_trace gpu new2
pipe_trace gpu var2
pipe_trace gpu base2
decode_ab gpu new var base new2 var2 base2
turnaround new var base
rm -f $m
finish s51d
