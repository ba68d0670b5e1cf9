#!/usr/bin/env bash
# Issue 17, session 67's third call: the attention output's product (Q4_K rows of 16 blocks, one token) in a wide
# Q4_K form, four lanes a block (dot_q4_K4: a lane both halves of dot_q4_K's two; integer sums, the same bits), two
# warps a row: 1,024 blocks whose warps each make one step, as main's 2,048 blocks of four warps a row do, held to
# 32 registers (__launch_bounds__(128, 16)). Half main's warps and registers: room beside the attention and, before
# the product ends, for the router's blocks (calls 1-2: the router 0.5 us shorter with room, the product's own
# speed the cost of every form that gave it). new = the wide form (branch s67-wide), base = main (681adf2).
# check_cuda_kernels' matmul (its 37-row, 4096-wide Q4_K one-token case takes the wide form) and matmul_heads, and
# check_cuda_fused's kernel and backend cases on new; traces in turns; all-GPU decode.
# Pack: PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager bench/guild-cuda-prof tools/guild-mkmodel
#       tests/cuda/check_cuda_kernels tests/cuda/check_cuda_fused" bash bench/device/pack-xz.sh WORKTREE OUT.
# Run: mkdir -p /tmp/c && tar -xJf .carry-E/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s67c.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s67c
pack_test 40 new "$C" check_cuda_kernels matmul "$O/kernels-matmul-new.log"
pack_test 40 new "$C" check_cuda_kernels matmul_heads "$O/kernels-heads-new.log"
pack_test 60 new "$C" check_cuda_fused kernel "$O/fused-kernel-new.log"
pack_test 60 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
for side in new base new2 base2 new3 base3 new4 base4; do pipe_trace gpu "$side"; done
decode_ab gpu new base
rm -f "$m"
finish s67c
