#!/usr/bin/env bash
# Session 47's second call on branch s47 (pack in $C as s47a.sh's; base: main's fec453c build in $C/base; var: the
# s47 build of f9d797f with -DGUILD_MM_SPLIT_MAX=2, one-token products split over at most 2 warps a row, in $C/var):
#   C=/tmp/c bash bench/device/s47b.sh [SECONDS]
# New since s47a: the router asks the next layer's dense weights into L2 once its logits are made (--cuda-off
# l2-next: not), while the routed experts run.
# 1. bench/device/alltests.sh, three programs at a time;
# 2. guild-cuda-prof --gpu-experts none (issue 17's GPU time a layer): base, new, new without l2-next, var, twice;
# 3. guild-cuda-prof with every expert on the GPU (one CUDA graph a step), the same four: dense_busy;
# 4. all-GPU decode (base, new, var) and experts-in-RAM decode (base, new, new without l2-next) at 512 positions,
#    in turns, twice each.
# Output under $OUT: s47b.log, alltests.log and s47b-files.tar.gz.
set -u
budget=${1:-420}
bash bench/device/alltests.sh 130 0 3 > /dev/null 2>&1
. bench/device/lib.sh # say, step, setup, finish, prof_ab, decode_ab, dense_busy, prof_bin
setup s47b
grep -E "rc=|Checks|FAIL|tests done" "$R/alltests.log" | grep -v "^rc=0" | tail -n 30
m=/tmp/q30b.gguf
step 40 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
prof_ab base new new+off-l2-next var base2 new2 new2+off-l2-next var2
for side in base new new+off-l2-next var; do
    pb=$(prof_bin "$side")
    # shellcheck disable=SC2046 # side_flags: words without blanks
    step 40 "guild-cuda-prof, every expert on the GPU ($side)" sh -c '"$0" "$@" > "'"$O"'/profg-'"$side"'.txt" 2>&1' \
        "$pb" -m "$m" --steps 32 --threads 14 $(side_flags "$side")
    dense_busy "$O/profg-$side.txt" 48
done
for side in base new new+off-l2-next var; do
    echo "-- $side"
    grep -E "^(router|rmsnorm_cl|matmul|attn_decode|qk_prep)" "$O/prof-$side.txt" | head -n 8
    echo "-- graph $side"
    grep -E "^(router|rmsnorm_cl|matmul|attn_decode|qk_prep|expert)" "$O/profg-$side.txt" | head -n 11
done
decode_ab gpu base new var base2 new2 var2
decode_ab ram base new new+off-l2-next base2 new2 new2+off-l2-next
rm -f $m
finish s47b
