#!/usr/bin/env bash
# Issue 17's dense decode step, session 28 (router): this build against a baseline in one call, the most telling
# first, every step budgeted:
#   - the CUDA tests of what changed (check_cuda_fused: the fused router's rank choice and register-held rows =
#     the separate product and top-k, the FFN norm in the router's launch = add + rmsnorm + fused router, and the
#     backend fused = unfused; _kernels: the norms; _backend: the CUDA backend = the CPU's; _seq; _clock: every span
#     of a step still known) beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - guild-cuda-prof --phases --no-trace of both builds: the untraced step clock;
#   - `guild bench run --populate 512 --gen 64 --runs 3 --single-process` of both builds, all on the GPU;
#   - greedy ids of both builds on a repetitive prompt (64 tokens, all on the GPU): equal.
# Run from the repo root:  bash bench/device/router.sh [SECONDS]
# with the pack in $C/c.tar.xz (default .carry-router): bin/ (guild, the workers, tools/guild-mkmodel,
# bench/guild-cuda-prof, tests/cuda/check_cuda_*), lib/, COMMIT, and base/ (the baseline's guild, workers and
# guild-cuda-prof) with BASE_COMMIT. Output: $OUT/router.log and $OUT/router-files.tar.gz (the tests' logs,
# prof-*.txt, the runs' output and JSON, the ids).
set -u
budget=${1:-122}
C=${C:-$PWD/.carry-router}
. bench/device/ab.sh # ab_*, say, step
ab_open router
tests="check_cuda_fused check_cuda_kernels check_cuda_backend check_cuda_seq check_cuda_clock"
ab_tests 55 $tests
ab_model 40
wait $ab_pids # the tests' pids only (a bare wait also waits for the log's tee)
ab_report $tests
grep -h "router fused" "$O/check_cuda_fused.log" | head -80
[ -f $m ] || exit 1
ab_prof phases-new "$B/bench/guild-cuda-prof" 17 --no-trace --phases
ab_prof phases-base "$P/base/guild-cuda-prof" 17 --no-trace --phases
ab_bench allgpu-new "$B" 27 --single-process --commit "$commit"
ab_bench allgpu-base "$P/base" 27 --single-process --commit "$base_commit"
ab_greedy ids-new "$B" 14
ab_greedy ids-base "$P/base" 14
ab_same ids-new "$O/ids-base.ids" "new, base"
ab_close router
