#!/usr/bin/env bash
# Issue 17's dense decode step, session 32 (layerfuse): a decode step's routed experts in one launch
# (cuda_expert_pairs_step: the down blocks of a pair start when that pair's gate/up blocks are done) against the
# baseline, in one call, the most telling first, every step budgeted (the kernel was slower and is not on main: branch
# layerfuse-onelaunch; bench/results/layerfuse-h200-2026-12-03-s32.md):
#   - check_cuda_fused's expert_time case alone (the GPU otherwise idle): the routed launches, cuda_expert_pairs'
#     two launches and the one launch in several shapes, 1-16 tokens, Q4_K and Q6_K down;
#   - the CUDA tests (check_cuda_fused: the one launch = the two launches bit for bit, the backend with it = without
#     it = unfused; _kernels, _backend (the CUDA backend = the CPU backend), _seq, _clock) beside guild-mkmodel's
#     Qwen3-30B-A3B shape;
#   - guild-cuda-prof --phases --no-trace of both builds (the untraced step clock), new first, then of var/ when the
#     pack has it (the same code with another default shape of the launch: VAR says which);
#   - `guild bench run --populate 512 --gen 64 --runs 3 --single-process`, all on the GPU, in two interleaved rounds
#     (new, base, var; then var, base, new);
#   - greedy ids of both builds on a repetitive prompt (64 tokens, all on the GPU): equal;
#   - guild-cuda-prof traced (CUPTI) of both builds, if the budget leaves room.
# Run from the repo root:  C=FOLDER bash bench/device/layerfuse.sh [SECONDS]
# with the pack in $C/c.tar.xz: bin/ (guild, tools/guild-mkmodel, bench/guild-cuda-prof, tests/cuda/check_cuda_*),
# lib/, COMMIT, base/ (the baseline's guild and guild-cuda-prof) with BASE_COMMIT, and optionally var/ (guild and
# guild-cuda-prof) with VAR. Output: $OUT/layerfuse.log
# and $OUT/layerfuse-files.tar.gz (the tests' logs, prof-*.txt, the runs' output and JSON, the ids).
set -u
budget=${1:-380}
C=${C:?C: the folder of the pack}
t0=$(date +%s)
. bench/device/ab.sh # ab_*, say, step
ab_open layerfuse
step 40 "expert pairs, timed alone" sh -c 'CK_RUN_CASE=expert_time "$0" > "'"$O/expert_time.log"'" 2>&1; st=$?;
    grep "^time:" "'"$O/expert_time.log"'"; tail -1 "'"$O/expert_time.log"'"; exit $st' "$B/tests/cuda/check_cuda_fused"
tests="check_cuda_fused check_cuda_kernels check_cuda_backend check_cuda_seq check_cuda_clock"
ab_tests 150 $tests
ab_model 90
wait $ab_pids # the tests' pids only (a bare wait also waits for the log's tee)
ab_report $tests
grep -h "^expert pairs step\|qwen3moe\|glm4moe" "$O/check_cuda_fused.log" | head -20
grep -h ":F:\|:E:" "$O"/check_cuda_*.log | head -20
[ -f $m ] || exit 1
var=
[ -x "$P/var/guild" ] && var=$(cat "$P/VAR" 2> /dev/null || echo var)
ab_prof phases-new "$B/bench/guild-cuda-prof" 25 --no-trace --phases
ab_prof phases-base "$P/base/guild-cuda-prof" 25 --no-trace --phases
[ -z "$var" ] || ab_prof phases-var "$P/var/guild-cuda-prof" 25 --no-trace --phases
ab_bench allgpu-new "$B" 35 --single-process --threads 14 --commit "$commit"
ab_bench allgpu-base "$P/base" 35 --single-process --threads 14 --commit "$base_commit"
[ -z "$var" ] || ab_bench allgpu-var "$P/var" 35 --single-process --threads 14 --commit "$commit $var"
ab_greedy ids-new "$B" 20
ab_greedy ids-base "$P/base" 20
ab_same ids-new "$O/ids-base.ids" "new, base"
[ -z "$var" ] || ab_bench allgpu-var2 "$P/var" 35 --single-process --threads 14 --commit "$commit $var"
ab_bench allgpu-base2 "$P/base" 35 --single-process --threads 14 --commit "$base_commit"
ab_bench allgpu-new2 "$B" 35 --single-process --threads 14 --commit "$commit"
# CUPTI-traced (no graph timing: each kernel's span, its early start with PDL included): which kernels the layer runs
AB_PROF_FROM="kernels per step" ab_prof trace-new "$B/bench/guild-cuda-prof" 25
AB_PROF_FROM="kernels per step" ab_prof trace-base "$P/base/guild-cuda-prof" 25
for f in "$O"/allgpu-*.json; do # each run's decode rates, for the results' table
    say "$(basename "$f" .json): decode_tok_s $(grep -o '"decode_tok_s": *[0-9.]*' "$f" | awk '{print $2}' | tr '\n' ' ')"
done
ab_close layerfuse
