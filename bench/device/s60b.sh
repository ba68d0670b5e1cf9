#!/usr/bin/env bash
# Session 60's first call (pack in $C, bench/device/pack-xz.sh: new = the cluster kernels without their release
# barrier, branch s60-mbar at bdf545e; var = new with the router's row loaded 16 at a time, branch s60-var at
# c159442; base = main's build):
#   C=/tmp/c bash bench/device/s60b.sh [SECONDS]
# A release arrive of a cluster barrier is MEMBAR.ALL.GPU on sm_90 (cuobjdump of main's router, cluster norm and
# decode attention: one each, on each kernel's path). new hands the values to the merging blocks as st.async stores
# counted on the receiver's mbarrier instead (cluster.cuh), the same values in the same places: the same bits.
# First check_cuda_fused on new (the three kernels' cases: a wrong byte count hangs), then alone (the attention at
# 576 keys, the router's phases, the head's times), the step in turns, the phases in the step, every CUDA test on
# new, check_cuda_fused on var, all-GPU decode, the experts-in-RAM step.
# Output under $OUT: s60b.log and s60b-files.tar.gz.
set -u
budget=${1:-560}
. bench/device/lib.sh
begin_bare s60b
pack_test 90 new "$C" check_cuda_fused "" "$O/fused-new.log"
attn_tl "576" new var base
head_tl new var base
for side in new var base; do
    grep_step 30 "cuda_head_time 1 ($side)" "time:|dense:" "$O/head-$side.txt" "$(cuda_tool "$side" cuda_head_time)" 1
done
for side in new base var new2 base2 var2; do pipe_trace gpu "$side"; done
step_tl router new var base
step_tl attn new base
alltests_new
prog_test 90 var "$C/lib" "$C/var/check_cuda_fused" "" "$O/fused-var.log"
decode_ab gpu new base var
for side in new base; do pipe_trace ram "$side"; done
rm -f "$m"
finish s60b
