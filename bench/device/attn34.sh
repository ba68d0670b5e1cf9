#!/usr/bin/env bash
# Session 34, attn34 (issues 17 and 18): the decode attention's launch forms (cuda_attn_form_t: the grid along the
# splits cut to 2 waves of the device, the row lengths read and empty blocks gone before the PDL wait, the L2
# prefetch of keys and values before it at <= 4 rows), one build A/B'd against itself with
# `--cuda-off attn-grid,attn-early` (the form before), in one call, every step budgeted:
#   - the CUDA tests of what changed (check_cuda_fused: the merge in the launch in every form = the merge kernel, bit
#     for bit; _attn, _kernels: the decode kernels against the CPU's; _backend; _seq and _batch: several rows and
#     sessions = each alone) beside guild-mkmodel's Qwen3-30B-A3B shape;
#   - tests/cuda/cuda_attn_time --short 32 512 2048 8192 (the attention alone, 48 layers, 1/4/16 rows, each form,
#     bits compared with the default's);
#   - guild-cuda-prof --phases --no-trace (the step clock) at 1 session and at 16 (issue 18's step), new and off in
#     flipped order;
#   - `guild bench run --populate 512 --gen 64 --runs 3 --single-process --threads 14` all on the GPU, new, off,
#     off, new;
#   - as the budget allows, the 16-session step again with --ctx 4096 (a captured grid sized for a long context: 64
#     splits, where the cut applies; the others' contexts give grids of 9).
# Usage, from the repo root: C=FOLDER bash FOLDER/attn34.sh [SECONDS], the pack in $C/c.tar.xz: bin/ (guild,
# tools/guild-mkmodel, bench/guild-cuda-prof, tests/cuda/check_cuda_* and cuda_attn_time), lib/, COMMIT. Output:
# $OUT/attn34.log and $OUT/attn34-files.tar.gz (the tests' logs, the timing, prof-*.txt, the runs' output and JSON).
# Without a GPU (or a pack) it says so and exits 0 after writing what it has.
set -u
budget=${1:-232}
C=${C:?C: the folder of the pack}
t0=$(date +%s)
. bench/device/ab.sh # ab_*, say, step
ab_open attn34
if ! nvidia-smi -L > /dev/null 2>&1 || [ ! -x "$B/guild" ]; then
    say "no GPU or no pack here: nothing measured"
    ab_close attn34
    exit 0
fi
OFF="--cuda-off attn-grid,attn-early"
tests="check_cuda_fused check_cuda_attn check_cuda_backend check_cuda_seq check_cuda_batch check_cuda_kernels"
ab_tests 80 $tests
ab_model 75
wait $ab_pids # the tests' pids only (a bare wait also waits for the log's tee)
ab_report $tests
grep -hE "^attention, merge in the launch" "$O/check_cuda_fused.log" > "$O/attn-cases.txt"
say "attention cases printed: $(wc -l < "$O/attn-cases.txt") ($(grep -c "default form" "$O/attn-cases.txt") in" \
    "the default form)"
grep -h ":F:\|:E:" "$O"/check_cuda_*.log | head -20
step 45 "timing" sh -c '"$0" --short 32 512 2048 8192 > "'"$O/time.log"'" 2>&1; st=$?; cat "'"$O/time.log"'";
    exit $st' "$B/tests/cuda/cuda_attn_time"
[ -s "$m" ] || { say "no model"; ab_close attn34; exit 1; }
AB_PROF_FROM="step clock"
ab_prof s1-new "$B/bench/guild-cuda-prof" 25 --no-trace --phases
ab_prof s1-off "$B/bench/guild-cuda-prof" 25 --no-trace --phases $OFF
ab_prof s16-off "$B/bench/guild-cuda-prof" 30 --no-trace --phases --sessions 16 $OFF
ab_prof s16-new "$B/bench/guild-cuda-prof" 30 --no-trace --phases --sessions 16
ab_bench allgpu-new "$B" 25 --single-process --threads 14 --commit "$commit"
ab_bench allgpu-off "$B" 25 --single-process --threads 14 --commit "$commit" $OFF
ab_bench allgpu-off2 "$B" 25 --single-process --threads 14 --commit "$commit" $OFF
ab_bench allgpu-new2 "$B" 25 --single-process --threads 14 --commit "$commit"
ab_prof s16c-new "$B/bench/guild-cuda-prof" 25 --no-trace --phases --sessions 16 --ctx 4096
ab_prof s16c-off "$B/bench/guild-cuda-prof" 25 --no-trace --phases --sessions 16 --ctx 4096 $OFF
for f in "$O"/prof-*.txt; do # layer 0's attention span and the device's step, for the results' table
    say "$(basename "$f" .txt): $(grep -E "its attention kernel done|-> last layer done|events around" "$f" |
        awk '{print $NF}' | tr '\n' ' ')"
done
for f in "$O"/allgpu-*.json; do # each run's decode rates
    say "$(basename "$f" .json): decode_tok_s $(grep -o '"decode_tok_s": *[0-9.]*' "$f" | awk '{print $2}' | tr '\n' ' ')"
done
rm -f "$m"
ab_close attn34
