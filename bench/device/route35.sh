#!/usr/bin/env bash
# Session 35, route35 (issue 18): a decode step's dense products at 8-16 rows, one call, every step budgeted:
#   - every CUDA test program, mkmodel_greedy.sh and spec_cuda.sh (alltests.sh, 6 at a time) with check_cuda_expert_mma's
#     "few timing" beside them (its bits: every few-token shape, 16 warps along K included, = dp4a) and the
#     Qwen3-30B-A3B-shaped model's writing;
#   - tests/cuda/cuda_head_time 1 4 8 16 of this build (the call of 2026-12-03 ran 2bcbb0b with `--pairs 0,9`: the
#     router a cluster a token, and two tokens a cluster from 9, an option reverted since) and of the baseline (cuda_head_time_base: the same program linked against the baseline's
#     kernels): the FFN head (norm + router + top-8), the block norm, qk_prepare, Q/K/V in one launch and the
#     output product (and its few-token shapes) over 48 layers' weights, us a layer;
#   - guild-cuda-prof --phases --no-trace at 16 sessions, --gpu-mem 8G (the step's spans), this build then the
#     baseline; `guild bench run --single-process` all on the GPU at one session, this build then the baseline
#     (the one-token router's code is the new kernel's); then, as the budget allows, the traced profiles (kernel
#     table) at 16 sessions of both.
# Usage, from the repo root: C=FOLDER bash FOLDER/route35.sh [SECONDS], the pack in $C/c.tar.xz: bin/ (guild, the
# workers, tools/guild-mkmodel, bench/guild-cuda-prof, tests/cuda/check_cuda_* and cuda_head_time), lib/, COMMIT,
# base/ (the baseline's guild, workers, guild-cuda-prof, cuda_head_time_base; BASE_COMMIT). Output:
# $OUT/route35.log, $OUT/alltests.log, $OUT/tests.tgz and $OUT/route35-files.tar.gz. Without a GPU (or a pack) it
# says so and exits 0.
set -u
budget=${1:-232}
C=${C:?C: the folder of the pack}
t0=$(date +%s)
. bench/device/ab.sh # ab_*, say, step
ab_open route35
if ! nvidia-smi -L > /dev/null 2>&1 || [ ! -x "$B/guild" ]; then
    say "no GPU or no pack here: nothing measured"
    ab_close route35
    exit 0
fi
BASE=$P/base
(timeout -s KILL 60 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o "$m" \
    > "$O/mk.txt" 2>&1
    echo "mkmodel rc=$?" >> "$O/mk.txt") &
mk=$!
(CK_RUN_CASE="few timing" timeout -s KILL 70 "$B/tests/cuda/check_cuda_expert_mma" > "$O/few-timing.txt" 2>&1
    echo "rc=$? (few timing)" >> "$O/few-timing.txt") &
ft=$!
OUT=$R C=$P bash bench/device/alltests.sh 112 0 6 > /dev/null
say "alltests: $(grep -c "^rc=0" "$R/alltests.log") steps rc=0, $(grep "^rc=" "$R/alltests.log" | grep -vc "^rc=0") not;" \
    "$(grep "^rc=" "$R/alltests.log" | grep -v "^rc=0" | tr '\n' ' ')"
wait $mk $ft
cat "$O/mk.txt"
grep -E "Checks|rc=|FAIL" "$O/few-timing.txt" | tail -4
step 40 "cuda_head_time (new)" sh -c '"$0" 1 4 8 16 > "'"$O/time-new.log"'" 2>&1; st=$?;
    grep -E "^(time|dense):" "'"$O/time-new.log"'"; exit $st' "$B/tests/cuda/cuda_head_time"
step 35 "cuda_head_time (base)" sh -c '"$0" 1 4 8 16 > "'"$O/time-base.log"'" 2>&1; st=$?;
    grep -E "^(time|dense):" "'"$O/time-base.log"'"; exit $st' "$BASE/cuda_head_time_base"
grep -q "mkmodel rc=0" "$O/mk.txt" || { say "no model"; ab_close route35; exit 1; }
AB_PROF_FROM="step clock"
S16="--gpu-mem 8G --sessions 16"
ab_prof s16-new "$B/bench/guild-cuda-prof" 30 --no-trace --phases $S16
ab_prof s16-base "$BASE/guild-cuda-prof" 30 --no-trace --phases $S16
ab_bench allgpu-new "$B" 28 --single-process --threads 14 --commit "$commit"
ab_bench allgpu-base "$BASE" 28 --single-process --threads 14 --commit "$base_commit"
AB_PROF_FROM="kernel "
ab_prof s16t-new "$B/bench/guild-cuda-prof" 25 $S16
ab_prof s16t-base "$BASE/guild-cuda-prof" 25 $S16
for f in "$O"/prof-s16-*.txt; do # layer 0's dense spans and the device's step
    say "$(basename "$f" .txt): $(grep -E "Q/K/V products done|output product|router done|block norm done|FFN norm done|-> last layer done|events around" "$f" |
        awk '{print $NF}' | tr '\n' ' ')"
done
for f in "$O"/allgpu-*.json; do
    say "$(basename "$f" .json): decode_tok_s $(grep -o '"decode_tok_s": *[0-9.]*' "$f" | awk '{print $2}' | tr '\n' ' ')"
done
rm -f "$m"
ab_close route35
