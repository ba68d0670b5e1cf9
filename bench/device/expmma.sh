#!/usr/bin/env bash
# Issue 18, session 31 (expmma): a decode step's routed experts at 2-16 tokens on int8 tensor cores, the step's
# pairs grouped by expert in the launch (cuda_expert_pairs_mma), against the dp4a kernel and the session-start
# build, one call, every step budgeted:
#   - check_cuda_pairs_mma's timing case alone (the GPU otherwise idle): the routed experts at the Qwen3-30B-A3B
#     shape, 1, 2, 4, 8, 16 tokens, the dp4a kernel (cuda_expert_pairs, its own choice) and each block shape of the
#     tensor-core kernel;
#   - check_cuda_pairs_mma's kernel cases (= the dp4a kernel bit for bit; at once = each token alone), and
#     check_cuda_expert_mma's "few bits" (the dense few-token kernel, whose block step mma_few.cuh now holds),
#     check_cuda_fused, check_cuda_seq, check_cuda_batch (the backend's batch invariance, now through the new
#     kernel at 2-16 rows), beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - `guild bench sessions --gpu-mem 8G --sessions 1,4,8,16` of the new build, the baseline, the new one again.
# Run from the repo root:  bash bench/device/expmma.sh [SECONDS]
# with the pack in $C/c.tar.xz (default .carry-expmma): bin/ (guild, the workers, tools/guild-mkmodel,
# tests/cuda/check_cuda_{pairs_mma,expert_mma,fused,seq,batch}), lib/, COMMIT, and base/ (the baseline's guild
# and workers) with BASE_COMMIT. Output: $OUT/expmma.log and $OUT/expmma-files.tar.gz (the tests' logs, the sessions' JSON).
set -u
budget=${1:-280}
C=${C:-$PWD/.carry-expmma}
. bench/device/ab.sh # ab_*, say, step
ab_open expmma
step 60 "pairs mma timed alone" sh -c 'CK_RUN_CASE=pairs_mma_time "$0" > "'"$O/pairs_mma_time.log"'" 2>&1; st=$?;
    grep "^time:" "'"$O/pairs_mma_time.log"'"; tail -1 "'"$O/pairs_mma_time.log"'"; exit $st' \
    "$B/tests/cuda/check_cuda_pairs_mma"
export CK_RUN_CASE=kernel # the bit cases only (the timing case ran alone above)
ab_tests 90 check_cuda_pairs_mma
pids=$ab_pids
export CK_RUN_CASE="few bits" # the dense few-token kernel, whose block step (mma_few.cuh) the new kernel shares
ab_tests 60 check_cuda_expert_mma
pids="$pids $ab_pids"
unset CK_RUN_CASE
ab_tests 100 check_cuda_fused check_cuda_seq check_cuda_batch
ab_pids="$pids $ab_pids"
tests="check_cuda_pairs_mma check_cuda_expert_mma check_cuda_fused check_cuda_seq check_cuda_batch"
ab_model 50
wait $ab_pids # the tests' pids only (a bare wait also waits for the log's tee)
ab_report $tests
grep -h "^pairs mma" "$O/check_cuda_pairs_mma.log" | tail -14
grep -h ":F:\|:E:" "$O"/check_cuda_*.log | head -20
[ -s "$m" ] || exit 1
sessions() { # TAG GUILD COMMIT
    step 50 "guild bench sessions ($1)" sh -c '"$0" "$@" > "'"$O/sessions-$1.out"'" 2>&1; st=$?;
        cat "'"$O/sessions-$1.out"'"; exit $st' "$2" bench sessions -m "$m" --gpu-mem 8G --threads 14 \
        --sessions 1,4,8,16 --prompt 128 --gen 16 --repeat 3 --commit "$3" --json "$O/sessions-$1.json"
}
sessions new "$B/guild" "$commit"
sessions base "$P/base/guild" "$base_commit"
sessions new2 "$B/guild" "$commit"
ab_close expmma
