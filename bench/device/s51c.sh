#!/usr/bin/env bash
# Session 51's third call: the attention and the router letting the next kernel launch after their keys and
# products (pdl_trigger), and the exchange's wait reading the cancel flag with the done counters (new), against main's
# 4ef3493 (var: /tmp/p40/var when packed, with its guild-cuda-prof) and 934f42a (base).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s51c
#   device: mkdir -p /tmp/c && tar -xJf .carry-s51c/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s51c.sh [SECONDS]
# 1. bench/device/alltests.sh;
# 2. the pipeline's GPU worker traced, every expert on the GPU and experts in RAM: new, var, in turns;
# 3. the attention's phases in the all-GPU step (guild-cuda-prof --timeline): new, var;
# 4. the CPU worker's dense_turnaround_us: new, var, in turns.
# Output under $OUT: s51c.log, alltests.log and s51c-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s51c
pipe_trace gpu new
pipe_trace gpu var
pipe_trace gpu new2
pipe_trace gpu var2
for what in attn; do
    for side in new var; do
        pb=$(prof_bin "$side")
        step 40 "guild-cuda-prof --timeline $what --gpu-experts all ($side)" sh -c 'f=$1; shift; "$0" "$@" > "$f" 2>&1;
            st=$?; grep -E "^timeline" "$f"; exit $st' "$pb" "$O/tl-$what-$side.txt" -m "$m" --steps 32 --threads 14 \
            --no-trace --timeline "$what" --gpu-experts all
    done
done
pipe_trace ram new
pipe_trace ram var
turnaround new var new2 var2
rm -f $m
finish s51c
