#!/usr/bin/env bash
# Session 54's device call (bench/results/attn54-h100-2026-12-06-s54.md): the decode attention's last tile. At the
# issue's 512 populated positions a decode row sees 513-576 keys: 8 splits of 65-72 keys, so every block of the
# cluster form takes a second 64-key tile holding 1-8 keys, and scored and summed it whole (a warp's 16 keys of
# scores and four k-steps of P V each).
#   new  = e2a320f (branch s54-attn): a split's last tile leaves out its 16-key groups past the split's end (the
#          warps past them score nothing, P V leaves their k-steps out: exact zeros, the same bits), and tile 1's
#          rows of earlier steps are asked for before the wait with tile 0's (pre1)
#   var  = new without pre1 (tile 1 asked for after the query's load, as main)
#   base = db7124a (main's kernels)
#   here:   new built in build/ (`make`, then every CUDA test program by name); var's programs and cuda_attn_time to
#           /tmp/p40/var; PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s54a
#   device: mkdir -p /tmp/c && tar -xJf .carry-s54a/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s54a.sh [SECONDS]
# 1. bench/device/alltests.sh on new (every CUDA test program, mkmodel_greedy.sh, spec_cuda.sh, pdl_loads.sh);
# 2. the attention alone (cuda_attn_time --timeline 512 520 576: one tile, then two) in new and var;
# 3. its phases in the all-GPU step (guild-cuda-prof --timeline attn) in new, var, base;
# 4. the pipeline's GPU worker traced with every expert on the GPU: new, var, base in turns three times; experts in
#    RAM: new, base;
# 5. all-GPU decode at 512 positions: new, var, base, in turns twice (3 runs each).
# Output under $OUT: s54a.log, alltests.log and s54a-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s54a
attn_tl "512 520 576" new var
step_tl attn new var base
for side in new var base new2 var2 base2 new3 var3 base3; do pipe_trace gpu $side; done
pipe_trace ram new
pipe_trace ram base
decode_ab gpu new var base new2 var2 base2
rm -f "$m"
finish s54a
