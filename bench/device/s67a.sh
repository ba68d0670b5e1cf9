#!/usr/bin/env bash
# Issue 17, session 67's first call: session 66's s66a.sh (never ran; removed since) with one more build. Builds, all
# traced in turns:
#   base = main (128 threads a product block);
#   new  = main + bench/device/s66a/mm_threads.patch (blocks of 256 threads, mm_split_warps counting blocks of
#          MM_THREADS / (32 KW) rows); var and varb the same at 512 and 64 threads (/tmp/p40/var, /tmp/p40/varb);
#   varc = main + bench/device/s67a/split_kw2.patch: mm_split_warps preferring two warps a row where both fit,
#          the attention output's 1,024 blocks of two rows, not 2,048 of one (/tmp/p40/varc): room beside the
#          attention for all of them, and for the router's blocks beside them (occupancy66 results).
# Also check_cuda_kernels' l2_stream (its cap case has never run on a GPU), matmul and matmul_heads cases and
# check_cuda_fused's kernel and backend cases on new; all-GPU decode of varc against base.
# Pack: PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager bench/guild-cuda-prof tools/guild-mkmodel
#       tests/cuda/check_cuda_kernels tests/cuda/check_cuda_fused" bash bench/device/pack-xz.sh WORKTREE OUT.
# Run: mkdir -p /tmp/c && tar -xJf .carry-C/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s67a.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s67a
pack_test 40 new "$C" check_cuda_kernels l2_stream "$O/kernels-l2-new.log"
pack_test 40 new "$C" check_cuda_kernels matmul "$O/kernels-matmul-new.log"
pack_test 40 new "$C" check_cuda_kernels matmul_heads "$O/kernels-heads-new.log"
pack_test 60 new "$C" check_cuda_fused kernel "$O/fused-kernel-new.log"
pack_test 60 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
for side in new base var varc new2 base2 var2 varb varc2 new3 base3 var3 varc3 varb2; do
    [ -d "$(bin_of "$side")" ] && pipe_trace gpu "$side"
done
decode_ab gpu varc base
rm -f "$m"
finish s67a
