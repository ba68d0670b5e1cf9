#!/usr/bin/env bash
# Session 43's fifth call (after bench/device/alltests.sh on the same pack): the tensor-core cluster form of the
# decode attention as the default (branch s43-cl), against --cuda-off attn-mma (the FMA forms) in the same build.
# Pack in $C: bin/ (guild, the workers, guild-mkmodel, guild-cuda-prof):
#   C=/tmp/c bash bench/device/s43e.sh [SECONDS]
# guild-mkmodel's qwen3-30b-a3b; guild-cuda-prof --gpu-experts none, default (new) and --cuda-off attn-mma (fma) in
# turns; all-GPU decode at 512 positions; experts-in-RAM decode at 512 positions, in turns.
# Output under $OUT: s43e.log and s43e-files.tar.gz.
set -u
budget=${1:-240}
. bench/device/lib.sh # say, step, setup, finish
setup s43e
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s43e; exit 1; }
off() { case $1 in fma*) echo "--cuda-off attn-mma" ;; esac; }
for side in new fma new2 fma2; do
    # shellcheck disable=SC2046 # off: two words or none
    step 40 "guild-cuda-prof --gpu-experts none ($side)" sh -c '"$0" "$@" > "'"$O"'/prof-'"$side"'.txt" 2>&1;
        st=$?; grep -E "GPU busy|attn_decode" "'"$O"'/prof-'"$side"'.txt" | head -n 3; exit $st' \
        "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --gpu-experts none $(off $side)
done
for side in new fma; do
    # shellcheck disable=SC2046
    step 20 "all-GPU decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$B/guild" bench run -m "$m" --populate 512 --runs 3 --gen 64 --json "$O/gpu-$side.json" $(off $side)
done
for side in new fma new2 fma2; do
    # shellcheck disable=SC2046
    step 35 "experts in RAM decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$B/guild" bench run -m "$m" --populate 512 --runs 3 --gen 48 --gpu-experts none --json "$O/ram-$side.json" \
        $(off $side)
done
rm -f $m
finish s43e
