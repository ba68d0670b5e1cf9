#!/usr/bin/env bash
# Session 29 (issues 14, 17): the CPU worker computes the down rows of the experts it prefetched on the cores that
# prefetched them (expert_pipe's pinned slices), and the "gpu" executor enqueues its resident experts' products
# after the prefetch hint. This build against the baseline in one call, interleaved (base, new) so that a machine
# whose memory bandwidth drifts between minutes moves both sides alike; bench/device/prefetch2.sh's measures:
#   - check_cuda_backend's hint case (in the background while the model is written);
#   - the Qwen3-30B-A3B shape (ab_model) and a routing profile recorded at --gpu-mem 8G by this build on session
#     26's text prompt (whole layers resident: its own decode and hit rates), the plan with it;
#   - rounds of --gpu-mem 8G with the profile (`guild run` of the prompt, 64 greedy tokens, --stats): base, new,
#     the ids compared; between them --gpu-experts none (`guild bench run --populate 512 --gen 64 --runs 3`, its
#     own DRAM probe), base after the first round, new after the second; time left: one more none run each.
# Run from the repo root:  C=.carry-prefetch3 bash bench/device/prefetch3.sh [SECONDS]
# with the pack in $C/c.tar.xz (bench/device/repack.sh --final plus tests/cuda/check_cuda_backend; base/ = the
# baseline's guild and workers). Output: $OUT/p3.log and $OUT/p3-files.tar.gz (every run's stderr and ids, the
# benches' output and JSON, the plan, the profile, the test's log).
# A dry run elsewhere: BACKEND=cpu MK=... SENT=8 CTX=512 GMEM=... (the same logic on the cpu backend).
set -u
budget=${1:-200}
C=${C:-$PWD/.carry-prefetch3}
. bench/device/ab.sh # ab_*, say, step
ab_open p3
m=${M:-$m} # a dry run's model elsewhere
BACKEND=${BACKEND:-cuda}
GMEM=${GMEM:-8G}
CTX=${CTX:-4160}
SENT=${SENT:-55}
ROUNDS=${ROUNDS:-3}
TH=${TH:-14}
L8=${L8:-20}
LN=${LN:-24}
left() { echo $((budget - ($(date +%s) - t0))); }
ab_pids=
if [ -x "$B/tests/cuda/check_cuda_backend" ]; then
    export CK_RUN_CASE=hints # the test's case of the gpu executor's hints only
    ab_tests 40 check_cuda_backend
    unset CK_RUN_CASE
fi
rm -f $m.routing
if [ -n "${MK:-}" ]; then # a dry run's small model
    # shellcheck disable=SC2086
    step 40 "mkmodel $MK" "$B/tools/guild-mkmodel" $MK --threads "$(nproc)" -q -o $m
else
    ab_model 40
fi
wait $ab_pids
[ -n "$ab_pids" ] && ab_report check_cuda_backend
[ -f $m ] || { say "no model"; exit 1; }
for i in $(seq 1 "$SENT"); do # session 26's text prompt: 55 sentences, ~3,000 tokens
    printf 'The quick brown fox %d jumps over the lazy dog while the committee reviews chapter %d of the report. ' \
        "$i" "$i"
done >$O/prompt.txt
run8() { # NAME BINDIR FLAGS...: guild run of the prompt at $GMEM, 64 greedy tokens, --stats
    local n=$1 bin=$2
    shift 2
    step "$L8" "run $n" sh -c 'g=$0 m=$1; shift; "$g" run -m "$m" -f "'"$O"'/prompt.txt" -n 64 --temp 0 \
        --threads '"$TH"' --ctx '"$CTX"' --batch 4096 --backend '"$BACKEND"' --gpu-mem '"$GMEM"' --stats \
        --ids-out "'"$O"'/'"$n"'.ids" "$@" 2> "'"$O"'/r-'"$n"'.txt" > /dev/null; st=$?; \
        grep -i "hit rate\|tok/s\|decode step\|error" "'"$O"'/r-'"$n"'.txt" | grep -v "^stats: layer"; exit $st' \
        "$bin/guild" $m "$@"
}
benchn() { # NAME BINDIR RUNS: guild bench run with every expert in RAM, RUNS measured runs after the warm-up
    local n=$1 bin=$2 runs=$3
    step $((LN + 5 * (runs - 1))) "bench $n" sh -c '"$0" "$@" > "'"$O"'/b-'"$n"'.txt" 2>&1; st=$?;
        grep -E "run [0-9]:|^ +512 |DRAM read|prefetch|rror" "'"$O"'/b-'"$n"'.txt" | tail -n 8; exit $st' \
        "$bin/guild" bench run -m $m --populate 512 --gen 64 --runs "$runs" --threads "$TH" --backend "$BACKEND" \
        --gpu-experts none --json "$O/n-$n.json"
}
run8 record "$B" --record-routing $m.routing
[ -f $m.routing ] || { say "no routing profile recorded"; exit 1; }
cp $m.routing "$O/q30b.gguf.routing"
"$B/guild" plan -m $m --backend "$BACKEND" --gpu-mem "$GMEM" --routing $m.routing --ctx "$CTX" --batch 4096 \
    >"$O/plan-profile.txt" 2>&1
grep -i "resident:" "$O/plan-profile.txt" | head -2
for i in $(seq 1 "$ROUNDS"); do
    if [ "$(left)" -lt $((2 * L8)) ]; then
        say "round $i skipped ($(left) s left)"
        break
    fi
    run8 "8g-base-$i" "$P/base" --routing $m.routing
    run8 "8g-new-$i" "$B" --routing $m.routing
    ab_same "8g-base-$i" "$O/8g-new-$i.ids" "8G round $i, base and new"
    [ "$i" = 1 ] && benchn base "$P/base" 3
    [ "$i" = 2 ] && benchn new "$B" 3
done
if [ "$(left)" -gt $((2 * LN)) ]; then
    benchn new-x "$B" 1
    benchn base-x "$P/base" 1
fi
rm -f $m.routing
for side in base new; do
    say "8G $side: decode $(grep -h 'decode:' "$O"/r-8g-$side-*.txt 2>/dev/null | grep -o '[0-9.]* tok/s' |
        tr '\n' ' ')"
    say "none $side: $(grep -h 'run [0-9]:' "$O"/b-$side*.txt 2>/dev/null | grep -o 'decode *[0-9.]*' | tr '\n' ' ')"
done
say "($(left) s left)"
ab_close p3
