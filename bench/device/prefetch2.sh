#!/usr/bin/env bash
# Session 28 (issues 14, 17): decode with expert prefetch where some experts are resident on the GPU, and with every
# expert in RAM, this build against the baseline in one call, INTERLEAVED (base, new, base, new, ...) so that a
# machine whose memory bandwidth drifts between minutes moves both sides alike; a DRAM read probe before every run.
#   0. check_cuda_backend's hint case (the gpu executor's hints, masked on the device), when packed;
#   1. the Qwen3-30B-A3B shape (guild-mkmodel --fill pool);
#   2. a routing profile recorded on a text prompt at --gpu-mem 8G (this build, whole layers resident: its own
#      decode and hit rates), as session 26 did (bench/results/measure-h200-2026-12-02-s26.md);
#   3. --gpu-mem 8G with that profile (its hottest experts resident): `guild run` of the same prompt (in sample),
#      64 tokens, --stats (GPU hit rate, prefetch hit rate, decode step), base / new x RUNS8;
#   4. --gpu-experts none: `guild bench run --populate 512 --gen 64 --runs 1`, base / new x RUNSN.
# Run from the repo root with the pack unpacked at $C (bin/, lib/, base/ = the baseline's guild and workers):
#   C=/tmp/c bash prefetch2.sh [SECONDS]
# A dry run elsewhere: BACKEND=cpu MK="--arch qwen3moe --layers 4 ..." SENT=8 CTX=512 GMEM=... (the same logic).
# Output under $OUT: pf2.log (everything as it goes), the runs' stderr (r-*.txt), the benches' JSON, the profile.
set -u
budget=${1:-225}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=${BASE:-$C/base}
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
BACKEND=${BACKEND:-cuda}
GMEM=${GMEM:-8G}
CTX=${CTX:-4160}
SENT=${SENT:-55}
RUNS8=${RUNS8:-3}
RUNSN=${RUNSN:-3}
TH=${TH:-14}
MK=${MK:---shape qwen3-30b-a3b --fill pool}
exec > >(tee -a "$O/pf2.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
left() { echo $((budget - ($(date +%s) - t0))); }
say "pf2: commit $(cat "$C/COMMIT" 2>/dev/null) base $(cat "$C/BASE_COMMIT" 2>/dev/null); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; $(nvidia-smi --query-gpu=name,memory.total,driver_version \
    --format=csv,noheader 2>&1 | head -1)"
# the gpu executor's hints (check_cuda_backend's case "hints", when packed): the masking on the device
if [ -x "$B/tests/cuda/check_cuda_backend" ]; then
    step 20 "check_cuda_backend hints" env CK_RUN_CASE=hints "$B/tests/cuda/check_cuda_backend"
fi
m=${M:-/tmp/q30b.gguf}
rm -f $m.routing
if [ ! -f $m ]; then
    # shellcheck disable=SC2086
    step 40 "mkmodel $MK" "$B/tools/guild-mkmodel" $MK --threads "$(nproc)" -q -o $m
fi
[ -f $m ] || { say "no model"; exit 1; }
ls -l $m
# session 26's text prompt (stream.sh profile): 55 sentences, ~3,000 tokens of guild-mkmodel's vocabulary
for i in $(seq 1 "$SENT"); do
    printf 'The quick brown fox %d jumps over the lazy dog while the committee reviews chapter %d of the report. ' \
        "$i" "$i"
done >$O/prompt.txt
probe() { # the DRAM read rate now (median of 3 passes over 2 GB)
    echo "probe: $("$B/guild" bench bw --gb 2 --passes 3 --threads "$TH" 2>&1 | grep 'read node=' | tail -1)"
}
run8() { # NAME BINDIR FLAGS...: guild run of the prompt at $GMEM, 64 tokens, --stats
    n=$1 bin=$2
    shift 2
    probe
    step 25 "run $n" sh -c 'g=$0 m=$1; shift; "$g" run -m "$m" -f "'"$O"'/prompt.txt" -n 64 --temp 0 --threads '"$TH"' \
        --ctx '"$CTX"' --batch 4096 --backend '"$BACKEND"' --gpu-mem '"$GMEM"' --stats "$@" \
        2> "'"$O"'/r-'"$n"'.txt" > /dev/null; st=$?; \
        grep -i "hit rate\|tok/s\|decode step\|error" "'"$O"'/r-'"$n"'.txt" | grep -v "^stats: layer"; exit $st' \
        "$bin/guild" $m "$@"
}
benchn() { # NAME BINDIR: guild bench run with every expert in RAM, one run after the warm-up
    n=$1 bin=$2
    step 22 "bench $n" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 |DRAM read|prefetch|rror" | tail -n 6' \
        "$bin/guild" bench run -m $m --populate 512 --gen 64 --runs 1 --threads "$TH" --backend "$BACKEND" \
        --gpu-experts none --json "$O/n-$n.json"
}

# 2. the profile, recorded by this build at $GMEM on the prompt (whole layers resident)
run8 record "$B" --record-routing $m.routing
[ -f $m.routing ] || { say "no routing profile recorded"; exit 1; }
cp $m.routing "$O/q30b.gguf.routing"
"$B/guild" plan -m $m --backend "$BACKEND" --gpu-mem "$GMEM" --routing $m.routing --ctx "$CTX" --batch 4096 \
    >"$O/plan-profile.txt" 2>&1
grep -i "experts in all\|resident\|hottest" "$O/plan-profile.txt" | head -4
# 3. the profile's hottest experts resident: base / new interleaved
for i in $(seq 1 "$RUNS8"); do
    run8 "8g-base-$i" "$BASE" --routing $m.routing
    run8 "8g-new-$i" "$B" --routing $m.routing
done
# 4. every expert in RAM: base / new interleaved
for i in $(seq 1 "$RUNSN"); do
    benchn "base-$i" "$BASE"
    benchn "new-$i" "$B"
done
rm -f $m.routing
# the medians
for side in base new; do
    say "8G $side: decode $(grep -h 'decode:' "$O"/r-8g-$side-*.txt 2>/dev/null | grep -o '[0-9.]* tok/s' |
        tr '\n' ' ')"
    say "none $side: $(grep -h -o '"decode_tok_s": *[0-9.]*' "$O"/n-$side-*.json 2>/dev/null | tr '\n' ' ')"
done
say "pf2 done ($(left) s left)"
