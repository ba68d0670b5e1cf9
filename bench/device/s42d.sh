#!/usr/bin/env bash
# Session 42's fourth call: the Q/K norms, RoPE and K/V stores in the decode attention's launch (cuda_attn_prep_t:
# qk_prepare's launch gone from a single sequence's decode and verify steps). Pack in $C: bin/ (the build, the CUDA
# tests that cover it), base/ (main 04b6d95: guild, the workers, guild-cuda-prof):
#   C=/tmp/c bash bench/device/s42d.sh [SECONDS]
# 1. the CUDA test programs of the pack and the GPU scripts, 4 at a time (alltests.sh): check_cuda_fused's new
#    kernel cases (the launch preparing = cuda_qk_prepare + the attention, output, quantized rows and caches) and its
#    backend cases (fused = separate launches), batch and sequence invariance, the backend against the CPU's,
#    speculative decoding (token-identical);
# 2. issue 17's GPU time a layer (guild-cuda-prof --gpu-experts none), new and base in turns;
# 3. all-GPU decode at 512 and 128 populated positions, new and base in turns.
# Output under $OUT: s42d.log, alltests.log, tests.tgz and s42d-files.tar.gz.
# Build: branch s42-prep at d44be66 (not landed: the attention grew by more than qk_prepare's launch).
set -u
budget=${1:-400}
. bench/device/lib.sh # say, step, setup, finish, bin_of, prof_ab, decode_ab
C=${C:-/tmp/c} OUT=${OUT:-/tmp/guild-out} bash bench/device/alltests.sh 150 0 4 > /dev/null 2>&1
setup s42d
grep -hE '^[0-9]+%: Checks|^rc=|^== .*tests done|^FAIL|^PASS' "$R/alltests.log" | sort | uniq -c | sort -rn | head -n 30
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s42d; exit 1; }
prof_ab new base new2 base2
decode_ab gpu new base new2 base2
for side in new base; do
    step 20 "all-GPU decode at 128 ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +128 " | tail -n 4' \
        "$(bin_of $side)/guild" bench run -m "$m" --populate 128 --runs 3 --gen 64 --json "$O/gpu128-$side.json"
done
rm -f $m
finish s42d
