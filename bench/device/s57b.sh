#!/usr/bin/env bash
# Session 57's second device call (issue 17): the router's cluster of 8 blocks of 16 warps in the step, where
# main's is 16 blocks of 8 warps (session 33 chose 16 on the router timed alone: 0.3 us faster at one token). In
# the step the router follows the output product, whose 2048 blocks fill every SM; a cluster of 8 needs room on
# fewer SMs of a GPC to become resident (bench/results/dense47-h200-2026-12-05-s47.md: the router is 1-1.5 us
# longer in the step than alone).
#   new  = branch s57-router8 (main with g_router_cluster's initial value 8: a measurement build)
#   base = db7124a (main's kernels)
#   here:   new built in build/ on branch s57-router8; base /tmp/p40/base; PACK_FILES= bash bench/device/pack-xz.sh
#           /work/main .carry-s57b
#   device: mkdir -p /tmp/c && tar -xJf .carry-s57b/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s57b.sh [SECONDS]
# The pipeline traced with every expert on the GPU, new and base in turns three times; alltests.sh on new; all-GPU
# decode of new and base. Output under $OUT: s57b.log, alltests.log and s57b-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
turns_ab s57b
