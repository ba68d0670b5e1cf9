#!/usr/bin/env bash
# Issue 17, session 65's third call: one decode row's Q/K preparation (per-head norms, RoPE, the K/V store) in the
# Q/K/V products' launch (branch s65-qkv: cuda_matmul_qkv_prep, each head's last block prepares it), against main
# (base): its bit tests first (check_cuda_qkv_prep; check_cuda_fused's backend cases, which now hold heads of 128),
# then traces in turns (new, base, new2, base2), every CUDA test program on new (alltests.sh), all-GPU and
# experts-in-RAM decode new/base.
# Pack: PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-B with /tmp/p40/base (main's build, flat).
# Run: mkdir -p /tmp/c && tar -xJf .carry-B/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s65b.sh [SECONDS]
set -u
budget=${1:-330}
. bench/device/lib.sh
begin_bare s65b
pack_test 90 new "$C" check_cuda_qkv_prep "" "$O/qkv-prep-new.log"
grep -c "bit for bit" "$O/qkv-prep-new.log"
pack_test 120 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
grep "heads of 128" "$O/fused-backend-new.log"
for side in new base new2 base2; do pipe_trace gpu "$side"; done
decode_ab gpu new base
decode_ab ram new base
alltests_new
rm -f "$m"
finish s65b
