#!/usr/bin/env bash
# Session 52's second call, two measurement variants of the router's launch in the all-GPU step (neither for main):
# new = 7c7e059 (E2: each block of the router's cluster takes all of an SM's shared memory for a block, so that no
# block of the experts' launch, let in after the router's products, runs beside its choosing block), var = main's
# router (00e18fd's binaries: main has not changed the kernels since), base = cf40c89 (E1: the router lets the
# experts' launch in after its choice instead of after its products).
#   here:   PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager tools/guild-mkmodel bench/guild-cuda-prof
#           tests/cuda/cuda_head_time" bash bench/device/pack-xz.sh /work/main .carry-s52b (the E2 branch built)
#   device: mkdir -p /tmp/c && tar -xJf .carry-s52b/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s52b.sh [SECONDS]
# 1. the router alone (cuda_head_time --timeline 1): new, var, base;
# 2. the pipeline's GPU worker traced with every expert on the GPU: new, var, base, in turns twice; experts in RAM:
#    new, var, base.
# Output under $OUT: s52b.log and s52b-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin_bare s52b
head_tl new var base
for side in new var base new2 var2 base2; do pipe_trace gpu $side; done
for side in new var base; do pipe_trace ram $side; done
rm -f $m
finish s52b
