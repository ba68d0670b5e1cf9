#!/usr/bin/env bash
# Issue 17, session 65's eighth call: Nsight Compute on main's dense decode kernels (with the experts' L2 windows),
# every expert on the GPU as the target's step has them, for where their time goes (stall reasons per issued
# instruction, at the device's own clocks and caches as the step leaves them): the block norm, the Q/K/V products,
# qk_prepare, the attention, the output product and the router of two layers of a decode step after two steps.
# Session 42's s42h.sh did this on the H200 for that session's kernels. Pack: s65f.sh's (base/ = main's build).
# Output under $OUT: s65g.log and s65g-files.tar.gz (ncu.txt, the whole report).
set -u
budget=${1:-150}
. bench/device/lib.sh
begin_bare s65g
step 120 "ncu: the dense kernels of two layers" sh -c '/usr/local/cuda/bin/ncu "$@" > "'"$O"'/ncu.txt" 2>&1; st=$?;
    grep -E "^  [a-z_]+.*\(|Duration|Elapsed Cycles|SM Frequency|Warp Cycles Per Issued|Memory Throughput|stalled" \
    "'"$O"'/ncu.txt" | head -n 200; exit $st' ncu \
    --kernel-name regex:"rmsnorm_cl|matmul_q_multi|qk_prepare|attn_decode_cl|matmul_q_split|router_cluster" \
    --launch-skip 700 --launch-count 14 --clock-control none --cache-control none --section SpeedOfLight \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
    "$BASE/guild-cuda-prof" -m "$m" --steps 4 --threads 14 --no-trace
rm -f "$m"
finish s65g
