#!/usr/bin/env bash
# Issue 17, session 67's fourth call: where the router's time goes in main's step, and what room changes in it.
# Calls 1-3 saw the router up to 0.5 us shorter when the output product leaves it room (--cuda-off mm-split: the
# row kernel's 512 blocks). Here the router's phases (guild-cuda-prof --timeline router, the step's last layer) with
# main's split product and with it off, in turns; the attention's phases; the router alone (cuda_head_time
# --timeline 1), warm and with --cold-l2. Main's build only (kernels of 681adf2).
# Pack: PACK_FILES="bench/guild-cuda-prof tools/guild-mkmodel tests/cuda/cuda_head_time" \
#       bash bench/device/pack-xz.sh /work/main OUT (no /tmp/p40/base or var* beside it)
# Run: mkdir -p /tmp/c && tar -xJf .carry-F/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s67d.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s67d
tl_router() { # NAME FLAGS...
    n=$1
    shift
    grep_step 40 "guild-cuda-prof --timeline router ($n)" "step wall|^timeline" "$O/tl-router-$n.txt" \
        "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --no-trace --timeline router "$@"
}
for turn in 1 2; do
    tl_router "main$turn"
    tl_router "nosplit$turn" --cuda-off mm-split
done
grep_step 40 "guild-cuda-prof --timeline attn" "step wall|^timeline" "$O/tl-attn.txt" \
    "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --no-trace --timeline attn
grep_step 40 "cuda_head_time --timeline 1" "^timeline" "$O/head-tl.txt" "$B/tests/cuda/cuda_head_time" --timeline 1
grep_step 40 "cuda_head_time --timeline 1 --cold-l2" "^timeline" "$O/head-tl-cold-l2.txt" \
    "$B/tests/cuda/cuda_head_time" --timeline 1 --cold-l2
rm -f "$m"
finish s67d
