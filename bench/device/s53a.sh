#!/usr/bin/env bash
# Session 53's device call, NOT RUN in session 53 (no device was lent): session 52's E3 made safe, for the next
# session's first call. Session 53 read the machine code (tests/cuda/pdl_loads.sh): E3's gate/up kernel loaded the
# expert ids (ld.global.nc) above its griddepcontrol.wait, before the router's finish had written them, which is
# why its bits changed in session 52. The variant reads the ids and the activation with coherent loads, which
# ptxas keeps after the wait:
#   new  = 43cec19 (branch s53-e3: the experts' gate/up launch lets the down products launch after its products;
#          no __restrict__ on its ids and activation)
#   base = db7124a (main at the pack: the gate/up launch lets them in at its start)
#   here:   build db7124a, copy guild, guild-cpu-worker, guild-gpu-worker, guild-stager, bench/guild-cuda-prof and a
#           COMMIT file to /tmp/p40/base; build 43cec19; PACK_FILES= bash bench/device/pack-xz.sh /work/main
#           .carry-s53a (27 MB)
#   device: mkdir -p /tmp/c && tar -xJf .carry-s53a/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s53a.sh [SECONDS]
# 1. bench/device/alltests.sh on new: every program E3 failed in session 52 (check_cuda_fused backend,
#    check_cuda_backend, check_cuda_clock, seq, batch, mtp, mkmodel_greedy.sh, spec_cuda.sh) must pass;
# 2. the pipeline's GPU worker traced with every expert on the GPU: new, base, new2, base2; experts in RAM: new, base
#    (E3 is the all-GPU path's; the RAM path must not move);
# 3. all-GPU decode at 512 positions: new, base, new2, base2 (3 runs each).
# Output under $OUT: s53a.log, alltests.log and s53a-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s53a
for side in new base new2 base2; do pipe_trace gpu $side; done
pipe_trace ram new
pipe_trace ram base
decode_ab gpu new base new2 base2
rm -f "$m"
finish s53a
