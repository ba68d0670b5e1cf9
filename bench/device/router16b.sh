#!/usr/bin/env bash
# Session 29, router16's second call (issue 18): one token a block at every size (a counter a token). The CUDA tests
# of what changed (check_cuda_fused: the fused router at 1-16 tokens = the separate launches, = each token alone, the
# scalar reference's choice, with its norm; _batch: several sessions' steps = each alone; _backend; _clock), the
# timing program of this build and of the baseline's libraries, `guild bench sessions --gpu-mem 8G --threads 14
# --sessions 1,4,16 --prompt 128 --gen 16 --repeat 3` new then base.
# Usage: C=.carry-router16 bash .carry-router16/router16b.sh [SECONDS]
set -u
budget=${1:-70}
C=${C:-$PWD/.carry-router16}
. bench/device/ab.sh # ab_*, say, step
ab_open router16b
tests="check_cuda_fused check_cuda_batch check_cuda_backend check_cuda_clock"
ab_tests 40 $tests
[ -s "$m" ] && say "model: $m kept from the call before" || ab_model 45
wait $ab_pids # the tests' pids only
ab_report $tests
grep -hE "^router fused" "$O/check_cuda_fused.log" > "$O/router-cases.txt"
say "router cases printed: $(wc -l < "$O/router-cases.txt"); the 16-token ones:"
grep " 16 tokens" "$O/router-cases.txt"
grep -hE "FAIL|Failure|:E:|:F:" "$O"/check_cuda_*.log | head -20
timing() { # TAG BINARY
    step 15 "timing $1" sh -c '"$0" > "'"$O/time-$1.log"'" 2>&1; st=$?; cat "'"$O/time-$1.log"'"; exit $st' "$2"
}
timing new "$B/tests/cuda/cuda_head_time"
timing base "$P/base/cuda_head_time_base"
[ -s "$m" ] || { say "no model"; ab_close router16b; exit 1; }
sessions() { # TAG GUILD COMMIT
    step 35 "guild bench sessions ($1)" sh -c '"$0" "$@" > "'"$O/sessions-$1.out"'" 2>&1; st=$?;
        sed -n "/^sessions decode/,\$p" "'"$O/sessions-$1.out"'"; exit $st' \
        "$2" bench sessions -m "$m" --gpu-mem 8G --threads 14 --sessions 1,4,16 --prompt 128 --gen 16 --repeat 3 \
        --commit "$3" --json "$O/sessions-$1.json"
}
sessions new "$B/guild" "$commit"
sessions base "$P/base/guild" "$base_commit" # as the budget allows (the first call ran both)
ab_close router16b
