#!/usr/bin/env bash
# Issue 17's routed experts of a decode step, session 28 (experts): this build against a baseline in one call, the
# most telling first, every step budgeted:
#   - check_cuda_fused's expert_time case alone (the GPU otherwise idle): a decode step's routed experts at the
#     Qwen3-30B-A3B shape, 1 and 4 tokens, the routed launches and cuda_expert_pairs's direct and staged kernels;
#   - the CUDA tests (check_cuda_fused: both kernels = the routed launches bit for bit, every type, 1-13 tokens;
#     _kernels, _backend, _seq) beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - guild-cuda-prof --phases --no-trace of both builds (the untraced step clock, layer 0's routed experts apart);
#   - `guild bench run --populate 512 --gen 64 --runs 3 --single-process` of both builds, all on the GPU;
#   - greedy ids of both builds on a repetitive prompt (64 tokens, all on the GPU): equal.
# Run from the repo root:  bash bench/device/experts2.sh [SECONDS [quick]]
# quick (a second call of the session, short of device time): no baseline step clock and no greedy runs.
# with the pack in $C/c.tar.xz: bin/ (guild, tools/guild-mkmodel, bench/guild-cuda-prof, tests/cuda/check_cuda_*),
# lib/, COMMIT, and base/ (the baseline's guild and guild-cuda-prof) with BASE_COMMIT. Output: $OUT/experts2.log
# and $OUT/experts2-files.tar.gz (the tests' logs, prof-*.txt, the runs' output and JSON, the ids).
set -u
budget=${1:-170}
quick=${2:-}
C=${C:?C: the folder of the pack}
. bench/device/ab.sh # ab_*, say, step
ab_open experts2
step 25 "expert pairs, timed alone" sh -c 'CK_RUN_CASE=expert_time "$0" > "'"$O/expert_time.log"'" 2>&1; st=$?;
    grep "^time:" "'"$O/expert_time.log"'"; tail -1 "'"$O/expert_time.log"'"; exit $st' "$B/tests/cuda/check_cuda_fused"
tests="check_cuda_fused check_cuda_kernels check_cuda_backend check_cuda_seq"
ab_tests 55 $tests
ab_model 40
wait $ab_pids # the tests' pids only (a bare wait also waits for the log's tee)
ab_report $tests
grep -h "^expert pairs" "$O/check_cuda_fused.log" | head -40
grep -h ":F:\|:E:" "$O"/check_cuda_*.log | head -20
[ -f $m ] || exit 1
ab_prof phases-new "$B/bench/guild-cuda-prof" 17 --no-trace --phases
ab_bench allgpu-new "$B" 27 --single-process --threads 14 --commit "$commit"
ab_bench allgpu-base "$P/base" 27 --single-process --threads 14 --commit "$base_commit"
[ -n "$quick" ] || ab_greedy ids-new "$B" 14
[ -n "$quick" ] || ab_greedy ids-base "$P/base" 14
ab_same ids-new "$O/ids-base.ids" "new, base"
[ -n "$quick" ] || ab_prof phases-base "$P/base/guild-cuda-prof" 17 --no-trace --phases
ab_close experts2
