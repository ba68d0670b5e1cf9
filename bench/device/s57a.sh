#!/usr/bin/env bash
# Session 57's device call (issue 17): a decode row's Q/K/V products and qk_prepare's work (per-head norms, RoPE,
# the K/V cache stores) in one launch, a thread block cluster a head (gpu-worker/dense/cuda/matmul_qkp.cu), against
# main's two launches.
#   new  = branch s57-qkp (clusters of 16 blocks of 8 warps; new+off-qk-fuse: the same build with main's launches)
#   var  = the same with -DQKP_CL=8 (clusters of 8 blocks of 16 warps)
#   base = db7124a (main's kernels)
#   here:   new built in build/ on branch s57-qkp; var: matmul_qkp.cu rebuilt with NVCCFLAGS="... -DQKP_CL=8" and the
#           programs relinked into /tmp/p40/var; base /tmp/p40/base; PACK_FILES= bash bench/device/pack-xz.sh
#           /work/main .carry-s57a
#   device: mkdir -p /tmp/c && tar -xJf .carry-s57a/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s57a.sh [SECONDS]
# lib.sh's fuse_ab: the pipeline traced with every expert on the GPU (new, base, var, new+off-qk-fuse, new2, base2,
# var2), check_cuda_qkp, alltests.sh on new, all-GPU decode of new, base, var, experts-in-RAM decode of new, base.
# Output under $OUT: s57a.log, alltests.log and s57a-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
fuse_ab s57a check_cuda_qkp qk-fuse new base
