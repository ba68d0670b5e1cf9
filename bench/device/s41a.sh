#!/usr/bin/env bash
# Session 41's first call (issue 17: the dense step's GPU time a layer; written in session 40, which had no device
# time), from the repo root with a pack unpacked in $C: bin/ (the new build: the MoE combine's slot loads all at once,
# the in-launch merge's partials asked for before their factors; every CUDA test), var/ (the same tree with
# AD_SPLIT_MIN 32: a split a 32-key tile; guild, the workers, guild-cuda-prof, cuda_attn_time and the bit/backend
# tests), base/ (main's guild, workers, stager, guild-cuda-prof, cuda_attn_time):
#   C=/tmp/c bash bench/device/s41a.sh [SECONDS]
# 1. every CUDA test program of bin/ and the GPU scripts, 4 at a time (alltests.sh); var's check_cuda_backend,
#    check_cuda_kernels and check_cuda_fused (a split's length moves rounding: the strict F32-cache cases);
# 2. cuda_attn_time --short (base, new, var in turns) and the timeline of new and var;
# 3. the Qwen3-30B-A3B shape: all-GPU decode and decode with every expert in RAM, new, base and var in turns, then
#    guild-cuda-prof --gpu-experts none (issue 17's GPU time a layer, CUPTI) and --phases (all on the GPU) of each.
# Output under $OUT: s41a.log, alltests.log, tests.tgz and s41a-files.tar.gz.
set -u
budget=${1:-400}
. bench/device/lib.sh # say, step, setup, finish, bin_of (base, var, new), decode_ab
C=${C:-/tmp/c} OUT=${OUT:-/tmp/guild-out} bash bench/device/alltests.sh 110 0 4 > /dev/null 2>&1
setup s41a
V=$C/var
grep -hE '^[0-9]+%: Checks|^rc=|^== .*tests done' "$R/alltests.log" | sort | uniq -c | sort -rn | head -n 30
pids=
for t in check_cuda_backend check_cuda_kernels check_cuda_fused; do
    (step 100 "var $t" sh -c '"$0" > "'"$O"'/var-'"$t"'.txt" 2>&1; st=$?; grep -E "^[0-9]+%|fail|FAIL" \
        "'"$O"'/var-'"$t"'.txt" | head -n 12; exit $st' "$V/$t") &
    pids="$pids $!"
done
# shellcheck disable=SC2086 # the pids: words
wait $pids # (a bare wait also waits for setup's tee, which never ends: the first run hung there)
for side in base new var base new var; do
    d=$(bin_of $side)
    t=$d/tests/cuda/cuda_attn_time
    [ -x "$t" ] || t=$d/cuda_attn_time
    step 25 "cuda_attn_time --short ($side)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/time-'"$side"'.txt"' \
        "$t" --short 128 512 2048
done
step 30 "cuda_attn_time --timeline (new)" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/timeline-new.txt"' \
    "$B/tests/cuda/cuda_attn_time" --timeline 64 128 512 544 2048
step 30 "cuda_attn_time --timeline (var)" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/timeline-var.txt"' \
    "$V/cuda_attn_time" --timeline 64 128 512 544 2048
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s41a; exit 1; }
decode_ab gpu new base var new2 base2 var2
decode_ab ram new base var
for side in new base var; do
    pb=$(bin_of $side)/guild-cuda-prof
    [ -x "$pb" ] || pb=$B/bench/guild-cuda-prof
    step 40 "guild-cuda-prof --gpu-experts none ($side)" sh -c '"$0" "$@" > "'"$O"'/prof-'"$side"'.txt" 2>&1;
        st=$?; grep -E "step wall|GPU busy|^(attn_decode|rmsnorm_kernel<true, 2|router_cl|matmul_q)" \
        "'"$O"'/prof-'"$side"'.txt" | head -n 9; exit $st' "$pb" -m "$m" --steps 32 --threads 14 --gpu-experts none
done
for side in new base var; do
    pb=$(bin_of $side)/guild-cuda-prof
    [ -x "$pb" ] || pb=$B/bench/guild-cuda-prof
    step 40 "guild-cuda-prof --phases ($side)" sh -c '"$0" "$@" > "'"$O"'/phases-'"$side"'.txt" 2>&1; st=$?;
        grep -E "layer 0|last layer" "'"$O"'/phases-'"$side"'.txt" | head -n 12; exit $st' \
        "$pb" -m "$m" --steps 32 --threads 14 --phases --no-trace
done
rm -f $m
finish s41a
