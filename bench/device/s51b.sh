#!/usr/bin/env bash
# Session 51's second call: the router's cluster form choosing with one warp over the few experts that can be among
# the k (rc_choose; new) against main's 4ef3493 (var: /tmp/p40/var when packed, with its cuda_head_time).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s51b
#   device: mkdir -p /tmp/c && tar -xJf .carry-s51b/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s51b.sh [SECONDS]
# 1. bench/device/alltests.sh (check_cuda_fused's router cases: every form's choice against the argmax passes);
# 2. the router alone, its phases (cuda_head_time --timeline 1): new, var, in turns;
# 3. the pipeline's GPU worker traced, every expert on the GPU and experts in RAM: new, var;
# 4. the CPU worker's dense_turnaround_us: new, var, in turns.
# Output under $OUT: s51b.log, alltests.log and s51b-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s51b
for side in new var new2 var2; do
    ht=$B/tests/cuda/cuda_head_time
    case $side in var*) ht=$C/var/cuda_head_time ;; esac
    step 30 "cuda_head_time --timeline 1 ($side)" sh -c '"$0" --timeline 1 > "$1" 2>&1; st=$?; grep "^timeline" "$1";
        exit $st' "$ht" "$O/head-tl-$side.txt"
done
pipe_trace gpu new
pipe_trace gpu var
pipe_trace ram new
pipe_trace ram var
turnaround new var new2 var2
rm -f $m
finish s51b
