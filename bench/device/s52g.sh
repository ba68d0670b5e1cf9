#!/usr/bin/env bash
# Session 52's seventh call: is the down products' read of the expert ids before their wait what made E3 (the
# experts' gate/up trigger after its products, 3d1444d) change the bits? The variant 4ea63d8 (branch
# s52-e3-noearly: E3 with that early read off) through the programs that failed with E3 in calls 5-6.
# NOT RUN: session 52's device time was spent before it (the next session's first experiment). The variant is
# 3d1444d cherry-picked onto main with run_device's down-product step_pairs(..., early = false) in
# gpu-worker/dense/cuda/cuda_moe_gpu.c. A second candidate to test the same way: with E3 the gate/up kernel's first
# instruction after its lone griddepcontrol.wait is a non-coherent load of lids[p] (const __restrict__: ld.global.nc,
# whose contract is data read-only for the kernel's lifetime, which a PDL dependent's lifetime does not give for its
# primary's outputs); ptxas may move it above the wait, where pdl_begin's launch_dependents right after the wait may
# have kept it below. E3 with lids and x read by __ldcg after the wait would tell.
#   here:   check_cuda_fused and check_cuda_clock of that build, stripped, with call 6's lib/, as .carry-s52g/p.tar.xz
#   device: bash bench/device/s52g.sh [SECONDS] (with .carry-s52g carried)
set -u
budget=${1:-60}
t0=$(date +%s)
. bench/device/lib.sh
R=${OUT:-/tmp/guild-out}
mkdir -p "$R" /tmp/pkg
exec > >(tee -a "$R/s52g.log") 2>&1
tar -xJf .carry-s52g/p.tar.xz -C /tmp/pkg
c=/tmp/pkg/N
say "s52g: $(cat $c/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
for run in 1 2; do
    step 20 "check_cuda_clock ($run)" env LD_LIBRARY_PATH=$c/lib CK_DEFAULT_TIMEOUT=30 sh -c '"$0" 2>&1 |
        grep -E "Checks|:F:" | cut -c1-200' "$c/bin/tests/cuda/check_cuda_clock"
    step 20 "check_cuda_fused backend ($run)" env LD_LIBRARY_PATH=$c/lib CK_DEFAULT_TIMEOUT=30 CK_RUN_CASE=backend \
        sh -c '"$0" 2>&1 | grep -E "Checks|:F:" | cut -c1-200' "$c/bin/tests/cuda/check_cuda_fused"
done
say "s52g done"
