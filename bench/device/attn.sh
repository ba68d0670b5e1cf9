#!/usr/bin/env bash
# Issue 17's dense decode step, session 28 (attn): this build against a baseline in one call, the most telling
# first, every step budgeted. Session 28 ran it on branch attn at 77cd09a (the tcase "stream bits" and the Q/K
# preparation's cases are on branches attn-s28-stream and attn-s28-prep; on main the first test step finds no such
# tcase: bench/results/attn-h200-2026-12-02-s28.md):
#   - the CUDA tests of what changed, beside guild-mkmodel's Qwen3-30B-A3B shape: check_cuda_fused (the decode
#     attention with its row's Q/K norms, RoPE and K/V store in its launch = qk_prepare + the attention),
#     check_cuda_expert_mma's "stream bits" (the one-token streaming kernel of the output head = the dp4a kernel,
#     and its timing at depths and grids), check_cuda_backend, _clock, _seq, _kv_long;
#   - guild-cuda-prof --phases --no-trace of both builds (the step clock, the LM head's span);
#   - `guild bench run --populate 512 --gen 64 --runs 3 --single-process` of both builds, all on the GPU;
#   - greedy ids of both builds on a repetitive prompt (64 tokens, all on the GPU): equal.
# Run from the repo root:  bash bench/device/attn.sh [SECONDS]
# with the pack in $C/c.tar.xz: bin/ (guild, the workers, tools/guild-mkmodel, bench/guild-cuda-prof,
# tests/cuda/check_cuda_*), lib/, COMMIT, and base/ (the baseline's guild, workers and guild-cuda-prof) with
# BASE_COMMIT. Output: $OUT/attn.log and $OUT/attn-files.tar.gz (the tests' logs, prof-*.txt, the runs' output and
# JSON, the ids).
set -u
budget=${1:-150}
t0=$(date +%s)
C=${C:-$PWD/.carry-attn}
. bench/device/ab.sh # ab_*, say, step
ab_open attn
say "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool (in the background, 45 s at most)"
(timeout -s KILL 45 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o $m \
    > "$O/mkmodel.log" 2>&1; echo "rc=$? (guild-mkmodel)" >> "$O/mkmodel.log") &
mpid=$!
# the output head's one-token kernel first and alone on the GPU (its timing undisturbed)
step 30 "check_cuda_expert_mma, tcase 'stream bits'" sh -c 'CK_RUN_CASE="stream bits" "$0" > "$1" 2>&1; st=$?;
    grep -E "^stream timing|^  depth|timing:|FAIL|[0-9]+%: Checks" "$1"; exit $st' \
    "$B/tests/cuda/check_cuda_expert_mma" "$O/check_cuda_expert_mma.log"
tests="check_cuda_fused check_cuda_backend check_cuda_seq check_cuda_clock check_cuda_kv_long"
ab_tests 35 $tests
wait $ab_pids $mpid # these pids only (a bare wait also waits for the log's tee)
say "$(tail -1 "$O/mkmodel.log")"
ab_report $tests
grep -h "Q/K preparation in the launch\|FAIL\|ERROR" "$O/check_cuda_fused.log" | head -20
grep -q "^rc=0 " "$O/mkmodel.log" || { ab_close attn; exit 1; }
ab_prof phases-new "$B/bench/guild-cuda-prof" 17 --no-trace --phases
ab_bench allgpu-new "$B" 27 --single-process --commit "$commit"
ab_bench allgpu-base "$P/base" 27 --single-process --commit "$base_commit"
ab_greedy ids-new "$B" 14
ab_greedy ids-base "$P/base" 14
ab_same ids-new "$O/ids-base.ids" "new, base"
# session 27's ids of the same prompt and model (fuse2: its build and 72d583c gave these), where carried
ab_same ids-new "$C/ids-s27.ids" "new, session 27's"
ab_prof phases-base "$P/base/guild-cuda-prof" 17 --no-trace --phases
ab_close attn
