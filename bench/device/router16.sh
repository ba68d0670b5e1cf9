#!/usr/bin/env bash
# Session 29, router16 (issues 18, 17): one call, this build against the baseline 19a0af4:
#   - the CUDA tests of what changed (check_cuda_fused: the grouped fused router at 1-16 tokens = the separate
#     launches and = each token alone, with its norm too; _seq and _kernels: qk_prepare; _batch: several sessions'
#     steps = each alone; _backend: = the CPU backend; _clock) beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - tests/cuda/cuda_head_time (the FFN head, the block norm and qk_prepare at 1/2/4/8/16 tokens, 48 layers) of
#     this build and the same program linked against the baseline's libraries (base/cuda_head_time_base);
#   - `guild bench sessions --gpu-mem 8G --threads 14 --sessions 1,4,16 --prompt 128 --gen 16 --repeat 3`, new
#     then base; guild-cuda-prof --sessions 16 of both as the budget allows.
# Usage: C=.carry-router16 bash .carry-router16/router16.sh [SECONDS]  (the pack $C/c.tar.xz: bin/, lib/, COMMIT,
# base/ with guild, the workers, guild-cuda-prof, cuda_head_time_base; BASE_COMMIT)
set -u
budget=${1:-125}
C=${C:-$PWD/.carry-router16}
. bench/device/ab.sh # ab_*, say, step
ab_open router16
tests="check_cuda_fused check_cuda_seq check_cuda_kernels check_cuda_batch check_cuda_backend check_cuda_clock"
ab_tests 60 $tests
ab_model 45
wait $ab_pids # the tests' pids only
ab_report $tests
grep -hE "^router fused" "$O/check_cuda_fused.log" > "$O/router-cases.txt"
say "router cases printed: $(wc -l < "$O/router-cases.txt"); the 16-token ones:"
grep " 16 tokens" "$O/router-cases.txt"
grep -hE "FAIL|Failure|:E:|:F:" "$O"/check_cuda_*.log | head -20
timing() { # TAG BINARY
    step 25 "timing $1" sh -c '"$0" > "'"$O/time-$1.log"'" 2>&1; st=$?; cat "'"$O/time-$1.log"'"; exit $st' "$2"
}
timing new "$B/tests/cuda/cuda_head_time"
timing base "$P/base/cuda_head_time_base"
timing new2 "$B/tests/cuda/cuda_head_time"
[ -s "$m" ] || { say "no model"; ab_close router16; exit 1; }
sessions() { # TAG GUILD COMMIT
    step 40 "guild bench sessions ($1)" sh -c '"$0" "$@" > "'"$O/sessions-$1.out"'" 2>&1; st=$?;
        sed -n "/^sessions decode/,\$p" "'"$O/sessions-$1.out"'"; exit $st' \
        "$2" bench sessions -m "$m" --gpu-mem 8G --threads 14 --sessions 1,4,16 --prompt 128 --gen 16 --repeat 3 \
        --commit "$3" --json "$O/sessions-$1.json"
}
sessions new "$B/guild" "$commit"
sessions base "$P/base/guild" "$base_commit"
prof16() { # TAG PROFILER
    step 20 "guild-cuda-prof --sessions 16 ($1)" sh -c '"$0" "$@" > "'"$O/prof-s16-$1.txt"'" 2>&1; st=$?;
        grep -E "step wall|router|rmsnorm|qk_prepare|matmul_plain" "'"$O/prof-s16-$1.txt"'"; exit $st' \
        "$2" -m "$m" --gpu-mem 8G --threads 14 --sessions 16 --populate 128 --steps 16
}
prof16 new "$B/bench/guild-cuda-prof"
prof16 base "$P/base/guild-cuda-prof"
ab_close router16
