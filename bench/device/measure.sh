#!/usr/bin/env bash
# Session 26's open device measurements in one call (bench/results/measure-h200-2026-12-02-s26.md), the short ones
# first so that they come back whatever the long ones do:
#   1. issue 17: decode with every expert in RAM (--gpu-experts none), the Qwen3-30B-A3B shape, medians of 3, then
#      the same with --spin-us 1000 (the doorbells spun through a layer's GPU time instead of 50 us);
#   2. issue 14: decode at --gpu-mem 8G with a routing profile (`stream.sh profile`: recorded by guild run
#      --record-routing on a text prompt, then that prompt and guild bench run with it; the hit rate printed), and
#      the same bench without the profile (layers 0-13 resident);
#   3. issue 18: populated-context curves at --gpu-mem 8G along one prompt (`longctx.sh`, --sweep): q4_0 to
#      131,072, q8_0 to 65,536 (its cache in GPU memory), then q8_0 at 131,072 (the plan puts that cache in host RAM)
#      when ~150 s are left, else f16 to 65,536 when ~60 s are.
# The model is written once (a warm machine may hold another call's file) and every step reuses it. Run from the
# repo root with the pack (repack.sh BUILD, then tar | xz) in $C/c.tar.xz (default .carry-measure):
#   bash bench/device/measure.sh [SECONDS]   (or $C/measure.sh with stream.sh and longctx.sh beside it)
# LAYERS=N cuts the model to N layers (a dry run of the script elsewhere). Output under $OUT: measure.log
# (everything, as it goes) and raw.tgz (every other log and the runs' JSON).
set -u
budget=${1:-340}
C=${C:-$PWD/.carry-measure}
# stream.sh and longctx.sh beside this script (in the carry, or bench/device); lib.sh from the tree
S=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
P=/tmp/guild-longctx # longctx.sh's folder; stream.sh takes it as its C (bin/, lib/, lib.sh, COMMIT)
mkdir -p $P && tar -C $P -xJf "$C/c.tar.xz" && cp bench/device/lib.sh $P/
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/measure.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit"
left() { echo $((budget - ($(date +%s) - t0))); }

m=/tmp/q30b.gguf
rm -f $m $m.routing
step 40 "model: Qwen3-30B-A3B shape, --fill pool${LAYERS:+, $LAYERS layers}" "$B/tools/guild-mkmodel" \
    --shape qwen3-30b-a3b ${LAYERS:+--layers $LAYERS} --fill pool \
    --threads "$(nproc)" -q -o $m
[ -f $m ] || { say "no model"; exit 1; }
ls -l $m

# 1. issue 17: every expert in RAM, the pipeline (one CPU worker, 14 threads), medians of 3
step 45 "bench run, experts in RAM (--gpu-experts none)" sh -c '"$0" "$@" > "'"$O"'/ram.out" 2>&1; st=$?; \
    grep -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker" "'"$O"'/ram.out" |
    grep -i "context\|decode\|warm\|wait\|#\|error" | tail -14; exit $st' \
    "$B/guild" bench run -m $m --populate 512,4096 --gen 64 --runs 3 --threads 14 --batch 4096 -v \
    --gpu-experts none --commit "$commit" --json "$O/ram.json"

# the same with the doorbells spun for 1 ms (default 50 us): does the CPU-worker wait hold a wake-up per layer?
step 30 "bench run, experts in RAM, --spin-us 1000" sh -c '"$0" "$@" > "'"$O"'/ram-spin.out" 2>&1; st=$?; \
    grep -i "^ *[0-9]\+ \|# decode\|error" "'"$O"'/ram-spin.out" | tail -4; exit $st' \
    "$B/guild" bench run -m $m --populate 512 --gen 64 --runs 3 --threads 14 --batch 4096 --spin-us 1000 \
    --gpu-experts none --commit "$commit" --json "$O/ram-spin1000.json"

# 2. issue 14: stream.sh profile as written, on this model (REUSE), which it leaves (KEEP) without the profile
l=$(($(left) < 100 ? $(left) : 100))
step "$l" "stream.sh profile" env C=$P REUSE=1 KEEP=1 bash "$S/stream.sh" profile $((l - 5))
rm -f $m.routing
say "profile: $(grep -h -i 'hit rate\|tok/s' "$O"/run-8g-*.txt 2> /dev/null | tr '\n' ' ')"
step 30 "bench run at 8G without a profile" sh -c '"$0" "$@" > "'"$O"'/q30-8g.out" 2>&1; st=$?; \
    grep -i "^ *[0-9]\+ \|# \|error" "'"$O"'/q30-8g.out" | tail -6; exit $st' \
    "$B/guild" bench run -m $m --populate 512 --gen 64 --runs 3 --threads 14 --batch 4096 --gpu-mem 8G \
    --commit "$commit" --json "$O/q30-8g.json"

# 3. issue 18: the curves (longctx.sh: no tests, no plans: the bench prints each stack's plan)
l=$(left)
step $((l < 175 ? l : 175)) "longctx q4_0" env C="$C" CASES= PLANS=0 GEN=32 bash "$S/longctx.sh" \
    $((l < 175 ? l - 3 : 172)) q4_0:4096,16384,32768,65536,131072
[ -f "$O/q4_0.json" ] && mv "$O/q4_0.json" "$O/q4_0-8g.json"
l=$(left)
step $((l < 65 ? l : 65)) "longctx q8_0 to 65,536" env C="$C" CASES= PLANS=0 GEN=32 bash "$S/longctx.sh" \
    $((l < 65 ? l - 3 : 62)) q8_0:4096,16384,32768,65536
[ -f "$O/q8_0.json" ] && mv "$O/q8_0.json" "$O/q8_0-8g.json"
l=$(left)
if [ "$l" -ge 150 ]; then
    step $((l - 2)) "longctx q8_0 at 131,072" env C="$C" CASES= PLANS=0 GEN=32 bash "$S/longctx.sh" $((l - 5)) \
        q8_0:131072
    [ -f "$O/q8_0.json" ] && mv "$O/q8_0.json" "$O/q8_0-8g-131072.json"
elif [ "$l" -ge 60 ]; then
    step $((l - 2)) "longctx f16 to 65,536" env C="$C" CASES= PLANS=0 GEN=32 bash "$S/longctx.sh" $((l - 5)) \
        f16:4096,16384,32768,65536
    [ -f "$O/f16.json" ] && mv "$O/f16.json" "$O/f16-8g.json"
else
    say "no time left for q8_0 at 131,072 or f16"
fi
# the bench tables (stdout of each run) as they ended
grep -h -A8 '^# guild bench run' "$O/longctx.log" "$O/ram.out" "$O"/profile.log 2> /dev/null | grep -v '^--$'
# every log and JSON in one file (at most 8 files come back)
cd "$O" && tar -czf /tmp/raw.tgz --exclude=measure.log . && mv /tmp/raw.tgz raw.tgz &&
    find . -maxdepth 1 -type f ! -name raw.tgz ! -name measure.log -delete
ls -l "$O"
say done
