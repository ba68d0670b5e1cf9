#!/usr/bin/env bash
# Session 41's third call (issue 17): the decode attention's short-span split rule (attn_decode.cu split_plan: a
# span of 65-256 keys in 32-key splits, 257-512 keys in 8 splits). Pack in $C: bin/ (the rule, every CUDA test),
# base/ (the build before it: s41b's "new"):
#   C=/tmp/c bash bench/device/s41c.sh [SECONDS]
# 1. every CUDA test program and the GPU scripts, 4 at a time (alltests.sh: the rule moves rounding at those spans);
# 2. cuda_attn_time --timeline and --short at 64-512 keys, base and new in turns;
# 3. all-GPU decode of the Qwen3-30B-A3B shape at 128 and 256 populated positions, new and base in turns.
# Output under $OUT: s41c.log, alltests.log, tests.tgz and s41c-files.tar.gz.
set -u
budget=${1:-300}
. bench/device/lib.sh # say, step, setup, finish, bin_of
C=${C:-/tmp/c} OUT=${OUT:-/tmp/guild-out} bash bench/device/alltests.sh 120 0 4 > /dev/null 2>&1
setup s41c
grep -hE '^[0-9]+%: Checks|^rc=|^== .*tests done|^FAIL|^PASS' "$R/alltests.log" | sort | uniq -c | sort -rn | head -n 40
at() { # SIDE: its cuda_attn_time
    t=$(bin_of "$1")/tests/cuda/cuda_attn_time
    [ -x "$t" ] || t=$(bin_of "$1")/cuda_attn_time
    echo "$t"
}
for side in base new base2 new2; do
    step 30 "cuda_attn_time --timeline ($side)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/timeline-'"$side"'.txt"' \
        "$(at $side)" --timeline 64 96 128 192 256 320 512
done
for side in base new; do
    step 25 "cuda_attn_time --short ($side)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/time-'"$side"'.txt"' \
        "$(at $side)" --short 96 192 256 512
done
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s41c; exit 1; }
for pos in 128 256; do
    for side in new base new2 base2; do
        step 20 "all-GPU decode at $pos ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +[0-9]+ " | tail -n 4' \
            "$(bin_of $side)/guild" bench run -m "$m" --populate $pos --runs 3 --gen 64 --json "$O/gpu$pos-$side.json"
    done
done
rm -f $m
finish s41c
