#!/usr/bin/env bash
# Issue 17's idle gap in the decode step (session 26): the step clock of this build (guild-cuda-prof --phases:
# host times around the graph's launch, device time between marks after the embedding, layer 0, the last layer
# and the LM head, all without CUPTI), beside the CUPTI profiles and the decode rates of this build and of a
# baseline, in one call. The most telling first, every step budgeted:
#   - the CUDA tests of the step (check_cuda_fused, _backend, _finite, _clock) beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - guild-cuda-prof --phases --no-trace: where an untraced decode step's time goes (this build);
#   - guild-cuda-prof --no-trace of the baseline: its untraced forward call;
#   - `guild bench run` decode, all on the GPU, medians of 3: this build, the baseline, the baseline with
#     --check-finite off (no memset node in its graph);
#   - guild-cuda-prof (CUPTI) of both builds: the idle column before each kernel (this build with --phases too);
#   - guild-cuda-prof --phases --no-trace --check-finite off and --cuda-off pdl (this build);
#   - greedy ids of both builds on a repetitive prompt (64 tokens, all on the GPU): equal;
#   - `guild bench run` with the multi-process pipeline at --gpu-mem 8G: this build, the baseline.
# Run from the repo root:  bash bench/device/stepgap.sh [SECONDS]
# with the pack in $C/c.tar.xz (default .carry-stepgap): bin/ (guild, the workers, tools/guild-mkmodel,
# bench/guild-cuda-prof, tests/cuda/check_cuda_{fused,backend,finite,clock}), lib/, COMMIT, and base/ (the
# baseline's guild, workers and guild-cuda-prof) with BASE_COMMIT. Output: $OUT/stepgap.log and
# $OUT/stepgap-files.tar.gz (the tests' logs, prof-*.txt, the runs' output and JSON, the ids).
set -u
budget=${1:-175}
C=${C:-$PWD/.carry-stepgap}
. bench/device/ab.sh # ab_*, say, step
ab_open stepgap
tests="check_cuda_fused check_cuda_backend check_cuda_finite check_cuda_clock"
ab_tests 50 $tests
ab_model 40
wait $ab_pids # the tests' pids only (a bare wait also waits for the log's tee)
ab_report $tests
[ -f $m ] || exit 1
AB_PROF_FROM="step wall" AB_GEN=32
prof() { # NAME PROFILER LIMIT FLAGS...: the step clock without the per-kernel lines
    ab_prof "$@" | grep -v "^  *[0-9a-z_]*<\|^[a-z_]*_kernel"
}
prof phases-new "$B/bench/guild-cuda-prof" 20 --no-trace --phases
prof untraced-base "$P/base/guild-cuda-prof" 18 --no-trace
ab_bench allgpu-new "$B" 24 --single-process --commit "$commit"
ab_bench allgpu-base "$P/base" 24 --single-process --commit "$base_commit"
ab_greedy ids-new "$B" 14
ab_greedy ids-base "$P/base" 14
ab_same ids-new "$O/ids-base.ids" "new, base"
ab_bench allgpu-base-nofinite "$P/base" 24 --single-process --check-finite off --commit "$base_commit"
prof cupti-new "$B/bench/guild-cuda-prof" 20 --phases
prof cupti-base "$P/base/guild-cuda-prof" 20
grep -E "rmsnorm_kernel<true, 0, 3>|get_rows|finite_reset|clock_mark" "$O/prof-cupti-new.txt" "$O/prof-cupti-base.txt"
prof phases-new-nofinite "$B/bench/guild-cuda-prof" 18 --no-trace --phases --check-finite off
prof phases-new-nopdl "$B/bench/guild-cuda-prof" 18 --no-trace --phases --cuda-off pdl
ab_bench pipe8g-new "$B" 30 --gpu-mem 8G --threads 14 --commit "$commit"
ab_bench pipe8g-base "$P/base" 30 --gpu-mem 8G --threads 14 --commit "$base_commit"
ab_close stepgap
