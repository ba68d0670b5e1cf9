#!/usr/bin/env bash
# Session 53's device call (run once, at the session's end: bench/results/dense53-h100-2026-12-05-s53.md): session
# 52's E3 made safe, and E10. Session 53 read the machine code (tests/cuda/pdl_loads.sh,
# bench/results/pdl53-vm-2026-12-05-s53.md): E3's gate/up kernel loaded the expert ids (ld.global.nc) above its
# griddepcontrol.wait, before the router's finish had written them, which is why its bits changed in session 52.
# The variants read the ids and the activation with coherent loads, which ptxas keeps after the wait:
#   new  = ad55436 (branch s53-e10): var, and the down products too wait at their start and let the next launch (the
#          fused norm) in after their products (E10: E3 made the down products and the norm after them shorter by
#          launching them later; the same for the norm)
#   var  = 43cec19 (branch s53-e3): the experts' gate/up launch lets the down products in after its products (E3),
#          no __restrict__ on the pair kernel's ids and activation; var/tests holds its check_cuda_fused,
#          check_cuda_backend and check_cuda_clock
#   base = db7124a (main at the pack: the gate/up launch lets them in at its start)
#   here:   each build's programs (`make`, then `make tests/cuda/check_cuda_...`: `make` alone leaves the test
#           programs as they were) to /tmp/p40/var and /tmp/p40/base with a COMMIT file; new built in build/;
#           PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s53a (28 MB)
#   device: mkdir -p /tmp/c && tar -xJf .carry-s53a/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s53a.sh [SECONDS]
# 1. bench/device/alltests.sh on new: every program E3 failed in session 52 (check_cuda_fused backend,
#    check_cuda_backend, check_cuda_clock, seq, batch, mtp, mkmodel_greedy.sh, spec_cuda.sh) must pass; var's three
#    test programs. Its pdl_loads.sh step compares new with main's list: it differs exactly in the 120
#    expert_pair_kernel instances' hint load, LDG.E.CONSTANT on main, LDG.E in the variants (branch s53-e3's list);
#    anything else there is news;
# 2. the pipeline's GPU worker traced with every expert on the GPU: new, var, base, in turns twice; experts in RAM:
#    new, base (the pair kernels are the all-GPU path's; the RAM path must not move);
# 3. all-GPU decode at 512 positions: new, var, base, in turns twice (3 runs each).
# Output under $OUT: s53a.log, alltests.log and s53a-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s53a
prog_test 60 var "$C/lib" "$C/var/tests/check_cuda_fused" backend "$O/var-check_cuda_fused.log"
prog_test 60 var "$C/lib" "$C/var/tests/check_cuda_backend" "" "$O/var-check_cuda_backend.log"
prog_test 60 var "$C/lib" "$C/var/tests/check_cuda_clock" "" "$O/var-check_cuda_clock.log"
for side in new var base new2 var2 base2; do pipe_trace gpu $side; done
pipe_trace ram new
pipe_trace ram base
decode_ab gpu new var base new2 var2 base2
rm -f "$m"
finish s53a
