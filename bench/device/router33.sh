#!/usr/bin/env bash
# Session 33, router33 (issue 17): the fused router (FFN norm + the router's F32 product + top-k + counts) in a
# thread block cluster a token against the baseline 06c2d7d, in one call, every step budgeted:
#   - the CUDA tests of what changed (check_cuda_fused: the fused router and its norm in each of its forms, a counter
#     of blocks, clusters of 16 and of 8, = the separate launches bit for bit, = each token alone; the backend fused
#     = unfused; _kernels, _backend, _seq, _batch, _clock) beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - tests/cuda/cuda_head_time of the baseline and of this build in every form (--forms), twice in turn;
#   - guild-cuda-prof --phases --no-trace of both builds (the step clock: layer 0's router span);
#   - `guild bench run --populate 512 --gen 64 --runs 3 --single-process --threads 14`, all on the GPU, new and base,
#     then base and new again as the budget allows; greedy ids of both equal.
# Usage, from the repo root: C=FOLDER bash FOLDER/router33.sh [SECONDS], the pack in $C/c.tar.xz: bin/ (guild,
# tools/guild-mkmodel, bench/guild-cuda-prof, tests/cuda/check_cuda_* and cuda_head_time), lib/, COMMIT, base/
# (guild, guild-cuda-prof, cuda_head_time_base) with BASE_COMMIT. Output: $OUT/router33.log and
# $OUT/router33-files.tar.gz (the tests' logs, the timings, prof-*.txt, the runs' output and JSON, the ids).
set -u
budget=${1:-280}
C=${C:?C: the folder of the pack}
t0=$(date +%s)
. bench/device/ab.sh # ab_*, say, step
ab_open router33
tests="check_cuda_fused check_cuda_kernels check_cuda_backend check_cuda_seq check_cuda_batch check_cuda_clock"
ab_tests 110 $tests
ab_model 90
wait $ab_pids # the tests' pids only (a bare wait also waits for the log's tee)
ab_report $tests
grep -hE "^router fused" "$O/check_cuda_fused.log" > "$O/router-cases.txt"
say "router cases printed: $(wc -l < "$O/router-cases.txt") ($(grep -c "clusters of 16" "$O/router-cases.txt") of" \
    "clusters of 16, $(grep -c "clusters of 8" "$O/router-cases.txt") of clusters of 8)"
grep -h "qwen3moe\|glm4moe" "$O/check_cuda_fused.log" | head -8
grep -h ":F:\|:E:" "$O"/check_cuda_*.log | head -20
timing() { # TAG BINARY ARGS...
    local tag=$1 bin=$2
    shift 2
    step 30 "timing $tag" sh -c '"$0" "$@" > "'"$O/time-$tag.log"'" 2>&1; st=$?;
        cat "'"$O/time-$tag.log"'"; exit $st' "$bin" "$@"
}
timing base "$P/base/cuda_head_time_base"
timing new "$B/tests/cuda/cuda_head_time" --forms 0,16,8
timing base2 "$P/base/cuda_head_time_base"
timing new2 "$B/tests/cuda/cuda_head_time" --forms 8,16,0
[ -s "$m" ] || { say "no model"; ab_close router33; exit 1; }
ab_prof phases-new "$B/bench/guild-cuda-prof" 25 --no-trace --phases
ab_prof phases-base "$P/base/guild-cuda-prof" 25 --no-trace --phases
ab_bench allgpu-new "$B" 30 --single-process --threads 14 --commit "$commit"
ab_bench allgpu-base "$P/base" 30 --single-process --threads 14 --commit "$base_commit"
ab_greedy ids-new "$B" 15
ab_greedy ids-base "$P/base" 15
ab_same ids-new "$O/ids-base.ids" "new, base"
ab_bench allgpu-base2 "$P/base" 30 --single-process --threads 14 --commit "$base_commit"
ab_bench allgpu-new2 "$B" 30 --single-process --threads 14 --commit "$commit"
for f in "$O"/allgpu-*.json; do # each run's decode rates, for the results' table
    say "$(basename "$f" .json): decode_tok_s $(grep -o '"decode_tok_s": *[0-9.]*' "$f" | awk '{print $2}' | tr '\n' ' ')"
done
ab_close router33
