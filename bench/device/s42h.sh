#!/usr/bin/env bash
# Session 42's eighth call: Nsight Compute (found on the device in s42g) on issue 17's decode kernels, for where a
# latency-bound launch's time goes inside it (stall reasons), which CUPTI's durations cannot say. Pack as s42g's plus
# bench/guild-cuda-prof:
#   C=/tmp/c bash bench/device/s42h.sh [SECONDS]
# guild-cuda-prof --gpu-experts none --no-trace (direct launches, no CUPTI of its own) under ncu: the decode
# attention, the router and the Q/K/V product of 4 layers of a decode step after the warm-up, each replayed alone.
# With WHAT=stalls (s42h's second run): at the device's own clocks and caches as a step leaves them (no clock lock,
# no cache flush between the replays), each kernel's stall reasons per issued instruction.
# Output under $OUT: s42h.log and s42h-files.tar.gz (ncu.txt, the whole report).
set -u
budget=${1:-150}
. bench/device/lib.sh # say, step, setup, finish
setup s42h
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s42h; exit 1; }
sections="--section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats"
[ "${WHAT:-}" = stalls ] && sections="--clock-control none --cache-control none --section SpeedOfLight \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
# shellcheck disable=SC2086 # sections: words without blanks
step 90 "ncu: attention, router, Q/K/V product" sh -c '/usr/local/cuda/bin/ncu "$@" > "'"$O"'/ncu.txt" 2>&1; st=$?;
    grep -E "^  [a-z_]+.*\(|Duration|Elapsed Cycles|SM Frequency|Warp Cycles Per Issued|Achieved Occupancy|Stall|Registers Per|stalled" \
    "'"$O"'/ncu.txt" | head -n 120; exit $st' ncu \
    --kernel-name regex:"attn_decode_gqa|router_cluster|matmul_q_multi2" --launch-skip 480 --launch-count 6 \
    $sections \
    "$B/bench/guild-cuda-prof" -m $m --steps 2 --threads 14 --gpu-experts none --no-trace
rm -f $m
finish s42h
