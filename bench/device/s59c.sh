#!/usr/bin/env bash
# Session 59's third call (the pack of s59b.sh: new = the pair path with P in stage 0's K rows, var = without the
# second tile's early loads, base = main's build):
#   C=/tmp/c bash bench/device/s59c.sh [SECONDS]
# Call 2: the pair path's attention is 0.35-0.45 us faster than main's alone at 576 keys, and 1.1-1.7 us slower in the
# step, where its phases after the keys grow (->end 1.82-1.87 us against 0.61 alone), even without its trigger.
# Is it the instruction caches (the pair path adds ~20 KB of code to the kernel's 86 KB)? The attention alone, each
# layer after a launch of cold code (--cold) and after the same FMAs in a loop (--warm), at 512 and 576 keys, twice.
# Output under $OUT: s59c.log and s59c-files.tar.gz.
set -u
budget=${1:-120}
. bench/device/lib.sh
setup s59c
for turn in 1 2; do
    for side in new var base; do
        for mode in --cold --warm; do
            grep_step 40 "cuda_attn_time $mode --timeline 512 576 ($side, $turn)" "^timeline" \
                "$O/attn-tl$mode-$side-$turn.txt" "$(cuda_tool "$side" cuda_attn_time)" $mode --timeline 512 576
        done
    done
done
finish s59c
