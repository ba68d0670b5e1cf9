#!/usr/bin/env bash
# Session 57's third device call (issue 17): a decode step's output product asks the router's weights (F32, 1 MB a
# layer of the Qwen3-30B-A3B shape) into L2 before its wait (cuda_matmul_l2: a prefetch hint a thread). The router's
# blocks cannot become resident behind the output product's 2048 blocks, which fill every SM, so their own loads of
# those weights (before their wait) start only when the product ends (bench/results/router57-h100-2026-12-06-s57.md:
# residency matters there; dense47-h200-2026-12-05-s47.md: the router is 1-1.5 us longer in the step than alone).
#   new  = branch s57-l2
#   base = db7124a (main's kernels)
#   here:   new built in build/ on branch s57-l2; base /tmp/p40/base; PACK_FILES= bash bench/device/pack-xz.sh
#           /work/main .carry-s57c
#   device: mkdir -p /tmp/c && tar -xJf .carry-s57c/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s57c.sh [SECONDS]
# lib.sh's turns_ab with the experts in RAM too. Output under $OUT: s57c.log, alltests.log and s57c-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
turns_ab s57c ram
