#!/usr/bin/env bash
# Session 56's device call (issue 17), session 55's s55b.sh on a pack of the branch as it would land: the
# attention's block norm in its Q/K/V launch, second form (a warp 4 rows, 2 of a pair's wider type; 20-22
# clusters of 8 blocks), not yet run (bench/results/qkvnorm55-h100-2026-12-06-s55.md: the first form, a warp a row,
# was bit-exact and far slower).
#   new  = branch s56-qkvnorm (s55-qkvnorm's kernels on main 45c8c4b; new+off-qkv-norm: the same build with main's
#          launches)
#   var  = s55-qkvnorm aace2d9 built with -DMN_ROWS=2 (a warp 2 rows, 1 of the wider type: 40-44 clusters)
#   base = db7124a (main's kernels)
#   here:   new built in build/ on branch s56-qkvnorm (`make`, the CUDA test programs by name); var and base as for
#           s55b (/tmp/p40/var, /tmp/p40/base); PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s56a
#   device: mkdir -p /tmp/c && tar -xJf .carry-s56a/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s56a.sh [SECONDS]
# 1. the model, then the pipeline's GPU worker traced with every expert on the GPU: new, base, var,
#    new+off-qkv-norm, new2, base2, var2 (the measure first: device time has been short);
# 2. check_cuda_qkv_norm, then bench/device/alltests.sh on new (every CUDA test program, as a step): new is what
#    would land, so a win here with every test passing lands without another call;
# 3. all-GPU decode at 512 positions: new, base, var (3 runs each).
# Output under $OUT: s56a.log, alltests.log and s56a-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
qkvnorm_ab s56a
