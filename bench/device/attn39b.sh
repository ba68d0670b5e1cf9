#!/usr/bin/env bash
# Session 39's attention calls (issue 17) with a changed decode attention kernel (the second: a key a lane; the
# fourth: a tile's scores, then one rescaling), from the repo root
# with a pack unpacked in $C (bin/: the build with every CUDA test; base/: main 7abef70's guild, workers, stager and
# guild-cuda-prof, and cuda_attn_time of 61930bb, the kernel before the change with the timeline):
#   C=/tmp/c bash bench/device/attn39b.sh [SECONDS]
# 1. every CUDA test program and the GPU scripts, 4 at a time (alltests.sh);
# 2. cuda_attn_time: the timeline of the new kernel, then the time of both kernels' launch forms, base then new;
# 3. the Qwen3-30B-A3B shape: all-GPU decode and decode with every expert in RAM, new and base in turns, then
#    guild-cuda-prof --gpu-experts none (issue 17's GPU time a layer, CUPTI) of both.
# Output under $OUT: attn39b.log, alltests.log, tests.tgz and attn39b-files.tar.gz.
set -u
budget=${1:-300}
. bench/device/lib.sh # say, step, setup, finish, bin_of, decode_ab, prof_ab
C=${C:-/tmp/c} OUT=${OUT:-/tmp/guild-out} bash bench/device/alltests.sh 90 0 4 > /dev/null 2>&1
setup attn39b
grep -hE '^[0-9]+%: Checks|^rc=|^== .*tests done' "$R/alltests.log" | sort | uniq -c | sort -rn | head -n 30
step 30 "cuda_attn_time --timeline (new)" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/timeline-new.txt"' \
    "$B/tests/cuda/cuda_attn_time" --timeline 64 128 512 2048
for side in base new base new; do
    bin=$B/tests/cuda/cuda_attn_time
    [ $side = base ] && bin=$BASE/cuda_attn_time
    step 25 "cuda_attn_time --short ($side)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/time-'"$side"'.txt"' \
        "$bin" --short 128 512 2048
done
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish attn39b; exit 1; }
decode_ab gpu new base new2 base2
decode_ab ram new base new2 base2
prof_ab new base
rm -f $m
finish attn39b
