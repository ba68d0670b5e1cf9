#!/usr/bin/env bash
# Session 52's seventh call, NOT RUN (the session's device time was spent; the next session's first experiment):
# why did E3 (3d1444d: the experts' gate/up launch lets the down products launch after its products) change the bits
# of the quantized test models in calls 5-6? Two variants of E3 on main, through the programs that failed with it:
#   N = 4ea63d8 (branch s52-e3-noearly): the down products' read of the expert ids before their wait off (run_device's
#       down-product step_pairs(..., early = false), gpu-worker/dense/cuda/cuda_moe_gpu.c);
#   K = 5975da6 (branch s52-e3-coh): the gate/up kernel reads the ids and the activation with coherent loads (no
#       __restrict__ on x and lids: ld.global, not ld.global.nc, after its lone griddepcontrol.wait; the .nc
#       contract, data read-only for the kernel's lifetime, does not hold for a PDL dependent's view of its primary's
#       outputs, and ptxas may move such a load above the wait).
# If K passes and N fails, the hazard is (b) and other kernels' .nc loads of their primary's outputs after a lone
# pdl_wait() (the decode attention's cluster form reads q so) want coherent loads too.
#   here:   each variant's check_cuda_fused and check_cuda_clock, stripped, with one lib/, as .carry-s52g/p.tar.xz
#           (N/ and K/; 22 MB)
#   device: bash bench/device/s52g.sh [SECONDS] (with .carry-s52g carried)
set -u
budget=${1:-90}
. bench/device/lib.sh
mkdir -p /tmp/pkg && tar -xJf .carry-s52g/p.tar.xz -C /tmp/pkg
C=/tmp/pkg/N setup s52g
say "s52g: N $(cat /tmp/pkg/N/COMMIT), K $(cat /tmp/pkg/K/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
for side in N K N2 K2; do
    c=/tmp/pkg/${side%2}
    pack_test 20 "$side" "$c" check_cuda_clock "" "$R/clock-$side.log"
    pack_test 20 "$side" "$c" check_cuda_fused backend "$R/backend-$side.log"
done
say "s52g done"
