#!/usr/bin/env bash
# Issue 17, session 62's first call: the decode row's Q/K norms, RoPE and K/V store in the attention's launch
# (cuda_attn_prep_t: qk_prepare_kernel's 1.86 us launch a layer gone, its work in attn_decode_cl_kernel's blocks),
# and session 61's prepared router form (bench/device/s61c/router-mbx.patch: the logits as async stores on the first
# block's mbarrier, no MEMBAR.ALL.GPU) as var. The target: <= 25 us of dense busy a layer (main: 25.39-25.50 us).
# Sides: new = this branch's full build (every program and CUDA test); base = main's build (flat, /tmp/p40/base);
# var = main + router-mbx.patch (flat, /tmp/p40/var: guild, the workers, cuda_head_time). new+off-qk-attn: new with
# the separate qk_prepare launch (--cuda-off qk-attn), the same bits.
# Pack: PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-A; then C=/tmp/c bash bench/device/s62a.sh [SECONDS]
set -u
budget=${1:-400}
. bench/device/lib.sh
begin_bare s62a
pack_test 90 new "$C" check_cuda_fused "" "$O/fused-new.log"
for side in new base var new+off-qk-attn new2 base2 var2 new3 base3; do pipe_trace gpu "$side"; done
for side in var base; do
    grep_step 30 "cuda_head_time --cold-l2 --timeline 1 ($side)" "^timeline" "$O/head-tl-cold-l2-$side.txt" \
        "$(cuda_tool "$side" cuda_head_time)" --cold-l2 --timeline 1
done
step_tl attn new base
alltests_new
decode_ab gpu new base var
decode_ab ram new base
rm -f "$m"
finish s62a
