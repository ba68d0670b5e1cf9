#!/usr/bin/env bash
# Session 51's first call: every CUDA test program on main (6849a6e's shared exchange helpers were built, never run),
# then the dense side's turnaround a layer as the CPU worker sees it (dense_turnaround_us, -v) for main, main with
# --cuda-off xchg-fuse and the base (934f42a), in turns, beside the pipeline's trace of main.
#   here:   PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s51a
#   device: mkdir -p /tmp/c && tar -xJf .carry-s51a/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s51a.sh [SECONDS]
# Output under $OUT: s51a.log, alltests.log and s51a-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s51a
turnaround new new+off-xchg-fuse base new2 base2
pipe_trace ram new
pipe_trace gpu new
rm -f $m
finish s51a
