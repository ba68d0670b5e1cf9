#!/usr/bin/env bash
# Session 55's second device call (issue 17; bench/results/qkvnorm55-h100-2026-12-06-s55.md): the attention's block
# norm in its Q/K/V launch (cuda_matmul_multi_norm: every cluster of 8 blocks norms the row itself, hands its Q8_K
# block to the others through distributed shared memory, then makes its rows' products; the norm's launch and the
# products' wait for it go away).
#   new  = branch s55-qkvnorm (new+off-qkv-norm: the same build with --cuda-off qkv-norm, main's launches)
#   base = db7124a (main's kernels)
#   here:   new built in build/ (`make`, then every CUDA test program by name); PACK_FILES= bash
#           bench/device/pack-xz.sh /work/main .carry-s55a (base in /tmp/p40/base)
#   device: mkdir -p /tmp/c && tar -xJf .carry-s55a/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s55a.sh [SECONDS]
# 1. bench/device/alltests.sh on new (every CUDA test program, check_cuda_qkv_norm among them, mkmodel_greedy.sh,
#    spec_cuda.sh, pdl_loads.sh);
# 2. the pipeline's GPU worker traced with every expert on the GPU: new, base, new+off-qkv-norm in turns three times;
#    experts in RAM (where the launch does not apply: the combine's rows are the workers'): new, base;
# 3. all-GPU decode at 512 positions: new, base in turns three times (3 runs each); experts in RAM: new, base.
# Output under $OUT: s55a.log, alltests.log and s55a-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s55a
for side in new base new+off-qkv-norm new2 base2 new3+off-qkv-norm new3 base3; do pipe_trace gpu $side; done
for side in new base; do pipe_trace ram $side; done
decode_ab gpu new base new2 base2 new3 base3
decode_ab ram new base
rm -f "$m"
finish s55a
