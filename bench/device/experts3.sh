#!/usr/bin/env bash
# Issues 17/18, session 29 (experts16): a decode step's routed experts with the step's pairs grouped by expert
# (expert_group_kernel, branch experts16-grouped: each block up to 2 or 4 pairs of one expert) against the
# session-start build, one call, every step budgeted:
#   - check_cuda_fused's expert_time case alone (the GPU otherwise idle): the routed experts at the Qwen3-30B-A3B
#     shape, 1, 2, 4, 8, 16 tokens, every rows-a-warp and pairs-a-block choice (1 pair a block: the baseline's
#     kernel, its code unchanged);
#   - check_cuda_fused (grouped = routed launches bit for bit, 16 tokens at once = each token alone) and
#     check_cuda_seq, beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - `guild bench sessions --gpu-mem 8G --sessions 1,4,16` of the new build, the baseline, the new one again.
# Run from the repo root:  bash bench/device/experts3.sh [SECONDS [quick]]
# quick (a second, short call): the timing case and check_cuda_fused's kernel cases only.
# with the pack in $C/c.tar.xz (default .carry-experts16): bin/ (guild, the workers, tools/guild-mkmodel,
# tests/cuda/check_cuda_fused, check_cuda_seq), lib/, COMMIT, and base/ (the baseline's guild and workers) with
# BASE_COMMIT. Output: $OUT/experts3.log and $OUT/experts3-files.tar.gz (the tests' logs, the sessions' JSON).
set -u
budget=${1:-165}
quick=${2:-}
C=${C:-$PWD/.carry-experts16}
. bench/device/ab.sh # ab_*, say, step
ab_open experts3
step 40 "expert pairs timed alone" sh -c 'CK_RUN_CASE=expert_time "$0" > "'"$O/expert_time.log"'" 2>&1; st=$?;
    grep "^time:" "'"$O/expert_time.log"'"; tail -1 "'"$O/expert_time.log"'"; exit $st' "$B/tests/cuda/check_cuda_fused"
if [ -n "$quick" ]; then
    export CK_RUN_CASE=kernel
    ab_tests 45 check_cuda_fused
    wait $ab_pids
    ab_report check_cuda_fused
    grep -h "^expert pairs" "$O/check_cuda_fused.log" | tail -8
    grep -h ":F:\|:E:" "$O/check_cuda_fused.log" | head -20
    ab_close experts3
    exit 0
fi
tests="check_cuda_fused check_cuda_seq"
ab_tests 70 $tests
step 50 "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b \
    --fill pool --threads 14 -q -o "$m"
wait $ab_pids # the tests' pids only (a bare wait also waits for the log's tee)
ab_report $tests
grep -h "^expert pairs" "$O/check_cuda_fused.log" | tail -8
grep -h ":F:\|:E:" "$O"/check_cuda_*.log | head -20
[ -s "$m" ] || exit 1
sessions() { # TAG GUILD COMMIT
    step 45 "guild bench sessions ($1)" sh -c '"$0" "$@" > "'"$O/sessions-$1.out"'" 2>&1; st=$?;
        cat "'"$O/sessions-$1.out"'"; exit $st' "$2" bench sessions -m "$m" --gpu-mem 8G --threads 14 \
        --sessions 1,4,16 --prompt 128 --gen 16 --repeat 3 --commit "$3" --json "$O/sessions-$1.json"
}
sessions new "$B/guild" "$commit"
sessions base "$P/base/guild" "$base_commit"
sessions new2 "$B/guild" "$commit"
ab_close experts3
