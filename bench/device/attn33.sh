#!/usr/bin/env bash
# Session 33, attn33 (issue 17): the decode attention's splits merged in thread block clusters (branch attn33,
# 8e3723a and aba3ad8; not main), one call against the baseline 06c2d7d:
#   - the CUDA tests of what changed (check_cuda_fused: the clusters' merge = the merge kernel, bit for bit;
#     _kernels, _attn: the decode kernels against the CPU's; _backend; _seq and _batch: several rows and sessions =
#     each alone; _kv_long) beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - tests/cuda/cuda_attn_time (the attention alone, 48 layers, 512/2048/8192 keys, 1/4/16 rows, its variants) of
#     this build and the same program linked against the baseline's libraries (base/cuda_attn_time_base);
#   - guild-cuda-prof --phases --no-trace (the step clock), then `guild bench run --populate 512` all on the GPU,
#     new and base, twice in flipped order, as the budget allows.
# Usage: C=.carry-attn33 bash .carry-attn33/attn33.sh [SECONDS]  (the pack $C/c.tar.xz: bin/ with
# tests/cuda/cuda_attn_time and bench/guild-cuda-prof, lib/, COMMIT, base/ with guild, the workers, guild-cuda-prof,
# cuda_attn_time_base; BASE_COMMIT)
set -u
budget=${1:-270}
t0=$(date +%s)
C=${C:-$PWD/.carry-attn33}
. bench/device/ab.sh # ab_*, say, step
ab_open attn33
tests="check_cuda_fused check_cuda_kernels check_cuda_attn check_cuda_backend check_cuda_seq check_cuda_batch"
ab_tests 75 $tests
(timeout -s KILL 60 "$B/tests/cuda/check_cuda_kv_long" > "$O/check_cuda_kv_long.log" 2>&1
    echo "rc=$? (check_cuda_kv_long)" >> "$O/check_cuda_kv_long.log") &
ab_pids="$ab_pids $!"
ab_model 60
wait $ab_pids # the tests' pids only
ab_report $tests check_cuda_kv_long
grep -hE "^attention, merge in the launch" "$O/check_cuda_fused.log"
grep -hE ":[EF]:" "$O"/check_cuda_*.log | head -20
timing() { # TAG BINARY
    step 40 "timing $1" sh -c '"$0" 32 512 544 1024 2048 8192 > "'"$O/time-$1.log"'" 2>&1; st=$?;
        cat "'"$O/time-$1.log"'"; exit $st' "$2"
}
timing new "$B/tests/cuda/cuda_attn_time"
timing base "$P/base/cuda_attn_time_base"
[ -s "$m" ] || { say "no model"; ab_close attn33; exit 1; }
AB_PROF_FROM="step clock"
ab_prof phases-new "$B/bench/guild-cuda-prof" 30 --no-trace --phases
ab_prof phases-base "$P/base/guild-cuda-prof" 30 --no-trace --phases
ab_bench allgpu-new "$B" 30 --single-process --threads 14 --commit "$commit"
ab_bench allgpu-base "$P/base" 30 --single-process --threads 14 --commit "$base_commit"
ab_bench allgpu-base2 "$P/base" 30 --single-process --threads 14 --commit "$base_commit"
ab_bench allgpu-new2 "$B" 30 --single-process --threads 14 --commit "$commit"
timing new2 "$B/tests/cuda/cuda_attn_time"
for j in "$O"/allgpu-*.json; do
    [ -s "$j" ] && say "$(basename "$j" .json): decode_tok_s $(grep -o '"decode_tok_s": *[0-9.]*' "$j" | awk '{printf "%s ", $2}')"
done
ab_close attn33
