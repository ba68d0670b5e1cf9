#!/usr/bin/env bash
# Written in session 59, not run (no device time left): does the step's code come from device memory? (pack in $C,
# bench/device/pack-xz.sh of main's build; with a var/ build, var's programs are timed too)
#   C=/tmp/c bash bench/device/s60a.sh [SECONDS]
# Session 59 (bench/results/attn59-h100-2026-12-06-s59.md): code changes to the decode attention lengthened its
# phases after the keys by 0.6-1.7 us in the step, and by only 0.2-0.5 us alone with --cold, which evicts the SM's
# instruction caches and not L2. In an all-GPU step a layer's weights (tens of MB) pass through the 50 MB L2 between
# two launches of one kernel. --cold-l2 (tests/cuda/cold_code.cu) reads twice L2's size before each layer's cold
# code: if the step's ->end is code fetched from device memory, the attention's ->end under --cold-l2 should match
# the step's (main: 0.61; main with its quantize out of line, call 5's var: 1.22 in the step).
# The attention alone (cuda_attn_time --timeline 512 576) and the router alone (cuda_head_time --timeline 1), each
# plain, --warm, --cold, --cold-l2, twice; new, and var if the pack has one.
# Output under $OUT: s60a.log and s60a-files.tar.gz.
set -u
budget=${1:-200}
. bench/device/lib.sh
setup s60a
sides=new
[ -d "$C/var" ] && sides="new var"
for turn in 1 2; do
    for side in $sides; do
        for mode in plain --warm --cold --cold-l2; do
            f=$mode
            [ "$mode" = plain ] && f=""
            # shellcheck disable=SC2086 # f: one word or none
            grep_step 40 "cuda_attn_time $mode --timeline 512 576 ($side, $turn)" "^timeline" \
                "$O/attn-tl$mode-$side-$turn.txt" "$(cuda_tool "$side" cuda_attn_time)" $f --timeline 512 576
            # shellcheck disable=SC2086
            grep_step 40 "cuda_head_time $mode --timeline 1 ($side, $turn)" "^timeline" \
                "$O/head-tl$mode-$side-$turn.txt" "$(cuda_tool "$side" cuda_head_time)" $f --timeline 1
        done
    done
done
finish s60a
