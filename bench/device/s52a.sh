#!/usr/bin/env bash
# Session 52's first call: the router's cluster form making its softmax beside the ranks by the logits
# (rc_choose_overlapped; new, 1938d2e), against main's 00e18fd (var: /tmp/p40/var when packed, with its
# guild-cuda-prof and cuda_head_time) and 44bf1bf (base: new with the router's trigger back at its wait, as before
# session 51: the trigger's own A/B).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s52a
#   device: mkdir -p /tmp/c && tar -xJf .carry-s52a/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s52a.sh [SECONDS]
# 1. bench/device/alltests.sh (check_cuda_fused's router cases: every form's choice against the argmax passes);
# 2. the router alone, its phases (cuda_head_time --timeline 1): new, var, base;
# 3. the pipeline's GPU worker traced with every expert on the GPU: new, var, base, in turns twice; experts in RAM:
#    new, var;
# 4. the CPU worker's dense_turnaround_us (and the run lines' own turnaround, session 51's counter, first on the
#    device): new, var; guild run --stats' turnaround line (new).
# Output under $OUT: s52a.log, alltests.log and s52a-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s52a
head_tl new var base
for side in new var base new2 var2 base2; do pipe_trace gpu $side; done
pipe_trace ram new
pipe_trace ram var
turnaround new var
step 40 "guild run --stats, experts in RAM (new)" sh -c '"$0" "$@" 2> "'"$O"'/run-stats.txt" > /dev/null; st=$?;
    grep -iE "turnaround|decode" "'"$O"'/run-stats.txt" | grep -v "^stats: layer"; exit $st' "$B/guild" run -m "$m" \
    -p "The quick brown fox jumps over the lazy dog and then" -n 48 --temp 0 --gpu-experts none --stats
rm -f $m
finish s52a
