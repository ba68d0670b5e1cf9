#!/usr/bin/env bash
# Issue 17, session 66's first call: the dense products' blocks of MM_THREADS 256 (new: 8 rows a block, half the
# blocks), 512 (var) and 64 (varb) threads against main's 128 (base), with mm_split_warps counting blocks of
# MM_THREADS / (32 KW) rows: check_cuda_kernels' l2_stream (its cap case had not run), matmul and matmul_heads
# cases and check_cuda_fused's kernel and backend cases on new, traces in turns, all-GPU decode.
# new = main + bench/device/s66a/mm_threads.patch; var and varb the same with its `#define MM_THREADS` set to 512
# and 64 (guild, guild-gpu-worker; /tmp/p40/var and /tmp/p40/varb).
# Pack: PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager bench/guild-cuda-prof tools/guild-mkmodel
#       tests/cuda/check_cuda_kernels tests/cuda/check_cuda_fused" bash bench/device/pack-xz.sh WORKTREE OUT.
# Run: mkdir -p /tmp/c && tar -xJf .carry-B/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s66a.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s66a
pack_test 40 new "$C" check_cuda_kernels l2_stream "$O/kernels-l2-new.log"
pack_test 40 new "$C" check_cuda_kernels matmul "$O/kernels-matmul-new.log"
pack_test 40 new "$C" check_cuda_kernels matmul_heads "$O/kernels-heads-new.log"
pack_test 60 new "$C" check_cuda_fused kernel "$O/fused-kernel-new.log"
pack_test 60 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
for side in new base var new2 base2 var2 varb new3 base3 var3 varb2; do
    [ -d "$(bin_of "$side")" ] && pipe_trace gpu "$side"
done
decode_ab gpu new base
rm -f "$m"
finish s66a
