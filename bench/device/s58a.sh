#!/usr/bin/env bash
# Session 58's first call (pack in $C, bench/device/pack-xz.sh; no base build):
#   C=/tmp/c bash bench/device/s58a.sh [SECONDS]
# The question: are the router and the attention 1-1.5 us longer in the step than alone because their code is out
# of the SM's instruction caches? Their SASS is 79 and 86 KB, the layer's kernels together ~270 KB; timed alone (a
# graph of 48 launches of one kernel) the code stays in the caches. tests/cuda/cold_code.cu puts 256 KB of
# straight-line code on every SM before each layer (--cold) or the same FMAs in a loop of little code (--warm, the
# control).
# 1. the attention alone, its phases (cuda_attn_time --timeline 512) plain, --warm, --cold, --warm, --cold;
# 2. the router alone, its phases (cuda_head_time --timeline 1), the same five;
# 3. the head's kernels alone at one token (cuda_head_time 1: the FFN head, the block norm, qk_prepare, Q/K/V and
#    the output product), --warm, --cold, --warm, --cold;
# 4. the attention's and the router's phases in the all-GPU step (guild-cuda-prof --timeline).
# Output under $OUT: s58a.log and s58a-files.tar.gz.
set -u
budget=${1:-300}
. bench/device/lib.sh
setup s58a
model_make
at=$B/tests/cuda/cuda_attn_time ht=$B/tests/cuda/cuda_head_time
for mode in plain warm cold warm2 cold2; do
    f=""
    case $mode in warm*) f=--warm ;; cold*) f=--cold ;; esac
    # shellcheck disable=SC2086 # f: one word or none
    grep_step 40 "cuda_attn_time $f --timeline 512 ($mode)" "^timeline" "$O/attn-tl-$mode.txt" "$at" $f --timeline 512
    # shellcheck disable=SC2086
    grep_step 40 "cuda_head_time --timeline $f 1 ($mode)" "^timeline" "$O/head-tl-$mode.txt" "$ht" --timeline $f 1
done
for mode in warm cold warm2 cold2; do
    f=--${mode%2}
    grep_step 60 "cuda_head_time $f 1 ($mode)" "^(head|norm|qk|dense)" "$O/head-$mode.txt" "$ht" "$f" 1
done
step_tl attn new
step_tl router new
rm -f "$m"
finish s58a
