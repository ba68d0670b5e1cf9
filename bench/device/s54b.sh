#!/usr/bin/env bash
# Session 54's second device call (bench/results/attn54-h100-2026-12-06-s54.md). The first (s54a.sh) found that a
# split's second key tile costs its attention ~0.8 us even when it holds 1-8 keys (tile->keys 2.05 us at 520 keys
# against 1.22 at 512, alone); leaving out its empty groups' work did not change that, and asking for its rows before
# the wait made the hand-over slower. So:
#   new  = branch s54-pass: a split of two tiles (spans of 513-1024 keys) scored, soft-maxed and summed in one pass
#          over both stages (K's and V's stages now next to each other), tile 1's groups to the warps in reverse, P V
#          without the k-steps past the split's end; other bits than main's for those spans (one softmax step where
#          two were), the same elsewhere; check_cuda_kernels gains three decode cases of such spans
#   base = db7124a (main's kernels)
#   here:   new built in build/ (`make`, then every CUDA test program by name); PACK_FILES= bash
#           bench/device/pack-xz.sh /work/main .carry-s54b (base in /tmp/p40/base)
#   device: mkdir -p /tmp/c && tar -xJf .carry-s54b/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s54b.sh [SECONDS]
# 1. bench/device/alltests.sh on new (every CUDA test program, mkmodel_greedy.sh, spec_cuda.sh, pdl_loads.sh);
# 2. the attention alone (cuda_attn_time --timeline 512 520 576 1000, and its times at those keys) in new;
# 3. its phases in the all-GPU step (guild-cuda-prof --timeline attn) in new and base;
# 4. the pipeline's GPU worker traced with every expert on the GPU: new, base in turns four times; experts in RAM:
#    new, base, twice;
# 5. all-GPU decode at 512 positions: new, base, in turns three times (3 runs each).
# Output under $OUT: s54b.log, alltests.log and s54b-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s54b
attn_tl "512 520 576 1000" new
grep_step 40 "cuda_attn_time 512 520 576 1000 (new)" "^time" "$O/attn-time-new.txt" "$B/tests/cuda/cuda_attn_time" 512 520 \
    576 1000
step_tl attn new base
for side in new base new2 base2 new3 base3 new4 base4; do pipe_trace gpu $side; done
for side in new base new2 base2; do pipe_trace ram $side; done
decode_ab gpu new base new2 base2 new3 base3
rm -f "$m"
finish s54b
