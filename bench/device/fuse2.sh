#!/usr/bin/env bash
# Issue 17's dense decode step, session 27 (fuse2): this build against a baseline in one call, the most telling
# first, every step budgeted:
#   - the CUDA tests of what changed (check_cuda_fused: the decode attention's merge of all a KV head's query
#     heads at once = the merge kernel; _kernels, _backend, _seq, _clock: the finer marks of layer 0) beside
#     guild-mkmodel's Qwen3-30B-A3B shape;
#   - guild-cuda-prof --phases --no-trace of both builds: the untraced step clock (this build's with layer 0's
#     attention and router split out; its logits into page-locked memory, backend_logits_alloc);
#   - `guild bench run --populate 512 --gen 64 --runs 3 --single-process` of both builds, all on the GPU;
#   - greedy ids of both builds on a repetitive prompt (64 tokens, all on the GPU): equal.
# Run from the repo root:  bash bench/device/fuse2.sh [SECONDS]
# with the pack in $C/c.tar.xz (default .carry-fuse): bin/ (guild, the workers, tools/guild-mkmodel,
# bench/guild-cuda-prof, tests/cuda/check_cuda_*), lib/, COMMIT, and base/ (the baseline's guild, workers and
# guild-cuda-prof) with BASE_COMMIT. Output: $OUT/fuse2.log and $OUT/fuse2-files.tar.gz (the tests' logs,
# prof-*.txt, the runs' output and JSON, the ids).
set -u
budget=${1:-165}
C=${C:-$PWD/.carry-fuse}
. bench/device/ab.sh # ab_*, say, step
ab_open fuse2
tests="check_cuda_fused check_cuda_kernels check_cuda_backend check_cuda_seq check_cuda_clock"
ab_tests 45 $tests
ab_model 40
wait $ab_pids # the tests' pids only (a bare wait also waits for the log's tee)
ab_report $tests
grep -h "merge in the launch" "$O/check_cuda_fused.log" | head -12
[ -f $m ] || exit 1
ab_prof phases-new "$B/bench/guild-cuda-prof" 17 --no-trace --phases
ab_bench allgpu-new "$B" 27 --single-process --commit "$commit"
ab_bench allgpu-base "$P/base" 27 --single-process --commit "$base_commit"
ab_greedy ids-new "$B" 14
ab_greedy ids-base "$P/base" 14
ab_same ids-new "$O/ids-base.ids" "new, base"
ab_prof phases-base "$P/base/guild-cuda-prof" 17 --no-trace --phases
ab_close fuse2
