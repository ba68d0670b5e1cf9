#!/usr/bin/env bash
# Session 57's fourth device call (issue 17): s57c's L2 hint for the router (the output product asks the router's
# weights into L2), and a second hint: qk_prepare asks the output product's weights (4.7 MB a layer of the
# Qwen3-30B-A3B shape) into L2 after its wait, for the output product's blocks that cannot become resident beside
# the attention's until it ends (cuda_qk_prepare_l2).
#   new  = branch s57-l2 (both hints)
#   var  = branch s57-l2 at the router's hint alone (s57c's new)
#   base = db7124a (main's kernels)
#   here:   var built in build/ at the router's hint alone, its programs copied into /tmp/p40/var; new built in build/
#           on branch s57-l2; base /tmp/p40/base; PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s57d
#   device: mkdir -p /tmp/c && tar -xJf .carry-s57d/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s57d.sh [SECONDS]
# The pipeline traced with every expert on the GPU, new, var and base in turns twice; alltests.sh on new; all-GPU
# decode of new, var and base. Output under $OUT: s57d.log, alltests.log and s57d-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin_bare s57d
for side in new var base new2 var2 base2; do pipe_trace gpu "$side"; done
alltests_new
decode_ab gpu new var base
rm -f "$m"
finish s57d
