#!/usr/bin/env bash
# Session 55's third device call (issue 17; bench/results/qkvnorm55-h100-2026-12-06-s55.md). The second (s55a.sh)
# found the first form of the attention's block norm in its Q/K/V launch bit-exact and far slower (14 us a launch
# against 6.9 for the norm's launch and the products'): 640-704 blocks of 256 threads, a warp a row, more clusters
# of 8 than the GPU holds at once beside the kernel before. Here a warp takes 4 rows (2 of a pair's wider type),
# loads interleaved (matmul_q_rows): 160-176 blocks, 20-22 clusters.
#   new  = branch s55-qkvnorm at this form (new+off-qkv-norm: the same build with main's launches)
#   var  = new built with -DMN_ROWS=2 (a warp 2 rows, 1 of the wider type: 320-352 blocks, 40-44 clusters)
#   base = db7124a (main's kernels)
#   here:   var's programs (make NVCCFLAGS="... -DMN_ROWS=2" guild guild-gpu-worker guild-cpu-worker guild-stager
#           bench/guild-cuda-prof) copied to /tmp/p40/var; new built in build/ (matmul_norm.cu touched, `make`, the
#           CUDA test programs by name); PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s55b (base in
#           /tmp/p40/base)
#   device: mkdir -p /tmp/c && tar -xJf .carry-s55b/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s55b.sh [SECONDS]
# 1. the model, then the pipeline's GPU worker traced with every expert on the GPU: new, base, var,
#    new+off-qkv-norm, new2, base2, var2 (the measure first: the device time left was short);
# 2. check_cuda_qkv_norm, then bench/device/alltests.sh on new (every CUDA test program, as a step);
# 3. all-GPU decode at 512 positions: new, base, var (3 runs each).
# Output under $OUT: s55b.log, alltests.log and s55b-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
qkvnorm_ab s55b
