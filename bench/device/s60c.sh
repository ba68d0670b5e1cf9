#!/usr/bin/env bash
# Prepared in session 60 for its second call; ran as session 61's first (bench/results/clmbar61-h100-2026-12-06-s61.md:
# varc won and landed). Pack: `bash bench/device/prep-s60c.sh` (builds every side from main and the patches
# in bench/device/s60c/, packs .carry-A). The sides (the branches of session 60's checkout they came from):
#   new  = cluster + router-mbar (s60-mbar2, e5ac7e3): the three cluster kernels without their release barrier;
#          the router's blocks each write their slice of the normed row after a phase 1 that follows every block's
#          reads, so no block has a path of its own after the logits and the first block's code follows its wait;
#   var  = new + router-batch (s60-mbar2-var, 2134520): the router's row loaded 16 at a time before its FMAs;
#   varb = cluster (s60-land, 8919d83): the attention's and the cluster norm's change alone, main's router (the
#          form to land if it wins);
#   varc = cluster + router-batch (s60-land-batch, b42a338): varb with the router's row loaded 16 at a time;
#   base = main.
#   C=/tmp/c bash bench/device/s60c.sh [SECONDS]
# Call s60b (bench/results/clmbar60-h100-2026-12-06-s60.md): the attention and the cluster norm each ~0.25 us a
# launch faster in the all-GPU step; the router 0.4 us faster alone (1.3 with the row batched) but 1.6-2.2 us slower
# in the all-GPU step, after its logits, in its first block's work (ranks 2.35 us against 1.02). cuobjdump: in that
# build the last block's norm writes (8 KB with their out-of-line checks) lie between the first block's wait and its
# code, where main has them at the kernel's end; new and var keep the first block's code right after its wait, varc
# keeps main's layout. The router alone with --cold and --cold-l2: whether code fetched from device memory shows the
# step's phases.
# Output under $OUT: s60c.log and s60c-files.tar.gz.
set -u
budget=${1:-500}
. bench/device/lib.sh
begin_bare s60c
pack_test 90 new "$C" check_cuda_fused "" "$O/fused-new.log"
for side in new base varb varc var; do pipe_trace gpu "$side"; done
head_tl new var varb varc base
for mode in --cold --cold-l2; do # code fetched cold (session 59's suspect), the SM's caches, and L2 too
    for side in new var varb varc; do
        grep_step 30 "cuda_head_time $mode --timeline 1 ($side)" "^timeline" "$O/head-tl$mode-$side.txt" \
            "$(cuda_tool "$side" cuda_head_time)" "$mode" --timeline 1
    done
done
for side in new2 base2 varb2 varc2 var2; do pipe_trace gpu "$side"; done
step_tl router new var varc base
for side in varb varc var; do prog_test 90 "$side" "$C/lib" "$C/$side/check_cuda_fused" "" "$O/fused-$side.log"; done
decode_ab gpu new base var varb varc
for side in new base varb; do pipe_trace ram "$side"; done
alltests_new
rm -f "$m"
finish s60c
