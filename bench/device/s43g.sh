#!/usr/bin/env bash
# Session 43's seventh call: main b19bd1c (the tensor-core cluster form of the decode attention, the default) against
# --cuda-off attn-mma (the FMA forms) in the same build, where earlier calls could not resolve it: experts-in-RAM
# decode in six alternating runs (the DRAM's slow phase), and guild bench sessions 1-16 at --gpu-mem 8G (issue 18's
# measure: up to 16 rows a decode step). Pack in $C: bin/ (guild, the workers, guild-mkmodel):
#   C=/tmp/c bash bench/device/s43g.sh [SECONDS]
# Output under $OUT: s43g.log and s43g-files.tar.gz.
set -u
budget=${1:-330}
. bench/device/lib.sh # say, step, setup, finish
setup s43g
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s43g; exit 1; }
off() { case $1 in fma*) echo "--cuda-off attn-mma" ;; esac; }
for side in new fma new2 fma2 new3 fma3; do
    # shellcheck disable=SC2046 # off: two words or none
    step 40 "experts in RAM decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$B/guild" bench run -m "$m" --populate 512 --runs 3 --gen 48 --gpu-experts none --json "$O/ram-$side.json" \
        $(off $side)
done
for side in new fma; do
    # shellcheck disable=SC2046
    step 60 "guild bench sessions 1-16 at 8G ($side)" sh -c '"$0" "$@" > "'"$O"'/sessions-'"$side"'.txt" 2>&1; st=$?;
        grep -E "^(sessions| +[0-9]+ +[0-9])" "'"$O"'/sessions-'"$side"'.txt"; exit $st' \
        "$B/guild" bench sessions -m "$m" --gpu-mem 8G --sessions 1,2,4,8,16 --prompt 128 --gen 16 --repeat 1 \
        --probes 1 --commit "$commit" --json "$O/sessions-$side.json" $(off $side)
done
rm -f $m
finish s43g
