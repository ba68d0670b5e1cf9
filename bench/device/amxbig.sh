#!/usr/bin/env bash
# Session 26's AMX call (issue 14: the CPU workers' routed-expert products at prefill batch sizes), in one device
# call within a budget of seconds. From the repo root with the pack in $C (default .carry-amxbig: bin/ with
# guild, the workers, the stager, tools/guild-mkmodel, tests/check_amx, tests/check_kernels and
# bench/amx_experts_bench; lib/; base/ with the baseline's guild and workers; COMMIT, BASE_COMMIT; this script and
# lib.sh):
#   bash $C/amxbig.sh [SECONDS]
# Steps, each under `timeout -s KILL` and skipped when it would not fit:
#   - guild-mkmodel --shape qwen3-235b-a22b --layers 30 in the background while check_amx and check_kernels run
#     side by side (the AMX kernels on the real tiles, bit for bit against the scalar references);
#   - amx_experts_bench --tmul (the tile unit's own rate), then the routed-expert products of both shapes at 64,
#     256 and 512 tokens per expert in both work orders ($V235 / $V30: which variants);
#   - guild bench experts --prefill 4096 (the expert pipeline itself, 256 tokens per expert), this build then
#     the baseline;
#   - guild bench run --populate 4096 on the 235B shape at --gpu-mem $GMEM (default 5.5G), this build then the
#     baseline, medians of $RUNS (default 3).
# Output: $OUT/amxbig.log (everything), the runs' JSON.
set -u
budget=${1:-200}
C=${C:-$PWD/.carry-amxbig}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=$C/base
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
log=$O/amxbig.log
t0=$(date +%s)
. "$C/lib.sh" # say, step
run() { "$@" 2>&1 | tee -a "$log"; }
run say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
run say "cpu: $(lscpu | sed -n 's/^Model name: *//p'); $(lscpu | sed -n 's/^Thread(s) per core: *//p') thread(s) a core;" \
    "L2 $(lscpu | sed -n 's/^L2 cache: *//p'); L3 $(lscpu | sed -n 's/^L3 cache: *//p'); MHz $(lscpu | sed -n 's/^CPU max MHz: *//p')" \
    "flags: $(grep -o -w 'amx_int8\|amx_tile\|amx_bf16\|amx_fp16\|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')"

m235=/tmp/q235b-30l.gguf
# the model file while the CPU checks run (bounded: timeout kills it)
(timeout -s KILL 110 "$B/tools/guild-mkmodel" --shape qwen3-235b-a22b --layers 30 --fill pool --threads "$(nproc)" \
    -q -o $m235 > "$O/mkmodel.txt" 2>&1
    echo "mkmodel rc=$?" >> "$O/mkmodel.txt") &
mk=$!
(timeout -s KILL 100 env CK_DEFAULT_TIMEOUT=300 "$B/tests/check_kernels" > "$O/check_kernels.txt" 2>&1
    echo "check_kernels rc=$?" >> "$O/check_kernels.txt") &
ck=$!
run step 100 check_amx env CK_DEFAULT_TIMEOUT=300 "$B/tests/check_amx"
run say "waiting for check_kernels and the model file"
wait $ck
run tail -3 "$O/check_kernels.txt"
wait $mk
run cat "$O/mkmodel.txt"
run step 15 "tile unit rate" "$B/bench/amx_experts_bench" --tmul --threads "$(nproc)"
run step 45 "expert products, Qwen3-235B-A22B shape" "$B/bench/amx_experts_bench" --shape 235b --tokens 64,256,512 \
    --runs 3 --threads "$(nproc)" --variants "${V235:-0,13,1,3,10,2,5,8,12}"
run step 30 "expert products, Qwen3-30B-A3B shape" "$B/bench/amx_experts_bench" --shape 30b --tokens 64,256,512 \
    --runs 3 --threads "$(nproc)" --variants "${V30:-0,13,3,10}"
for side in new base; do
    bin=$B
    [ $side = base ] && bin=$BASE
    run step 25 "guild bench experts --prefill 4096 ($side)" "$bin/guild" bench experts --type q4_K --down-type q6_K \
        --shape qwen3-235b-a22b --tokens 1 --steps 4 --runs 3 --prefill 4096 --threads 14 --gb 2
done
if [ -f $m235 ] && grep -q "mkmodel rc=0" "$O/mkmodel.txt"; then
    for side in new base; do
        bin=$B c=$commit
        [ $side = base ] && bin=$BASE c=$base_commit
        run step "${BLIM:-70}" "bench run 235B tight ($side)" sh -c '"$0" "$@" > "'"$O"'/run-'$side'.txt" 2>&1; st=$?;
            grep -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker" "'"$O"'/run-'$side'.txt" | tail -60; exit $st' \
            "$bin/guild" bench run -m $m235 --populate 4096 --gen 16 --runs "${RUNS:-3}" --threads 14 --batch 4096 -v \
            --gpu-mem "${GMEM:-5.5G}" --commit "$c" --json "$O/q235-tight-$side.json"
    done
fi
rm -f $m235
run say done
