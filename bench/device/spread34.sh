#!/usr/bin/env bash
# Issue 18: batched decode at --gpu-mem 8G with the GPU's experts as whole layers (the plan without a routing
# profile: no CPU round trip in those layers, their experts' products in the GPU's part of the step) against the
# hottest experts of a routing profile spread over every layer (their products run while the CPU side computes,
# one round trip a layer). `guild bench sessions --sessions 1,8,16`, both placements, alternating.
# From the repo root with the pack in $C (bin/, lib/, COMMIT):   C=/tmp/c bash bench/device/spread34.sh [SECONDS] [REPEAT]
# Output under $OUT: spread.log and spread-files.tar.gz (the sessions' output and JSON, the plans).
set -u
budget=${1:-330}
repeat=${2:-10}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-spread-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/spread.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step, prompt8, run8
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
say "spread34: commit $commit; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
m=/tmp/q30b.gguf
step 80 "write the model" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || { say "no model"; exit 1; }
prompt8 "$O/prompt.txt"
run8 record "$B" --record-routing $m.prof --routing none
for r in none $m.prof; do
    "$B/guild" plan -m $m --backend cuda --gpu-mem 8G --routing $r --ctx 4096 > "$O/plan-$(basename $r).txt" 2>&1
    grep -i -E "resident|experts on the gpu" "$O/plan-$(basename $r).txt" | head -3
done
sess() { # NAME ROUTING REPEAT
    step $((20 + 6 * $3)) "sessions 1,8,16 x $3, routing $2 ($1)" \
        sh -c '"$0" "$@" > "'"$O"'/sessions-'"$1"'.txt" 2>&1; st=$?;
        sed -n "/^# paired: each/,\$p" "'"$O"'/sessions-'"$1"'.txt"; grep -E "^ +(1|8|16) " "'"$O"'/sessions-'"$1"'.txt" | head -6; exit $st' \
        "$B/guild" bench sessions -m $m --gpu-mem 8G --threads 14 --sessions 1,8,16 --prompt 128 --gen 16 \
        --repeat "$3" --probes 1 --routing "$2" --commit "$commit" --json "$O/sessions-$1.json"
}
[ -f $m.prof ] || { say "no routing profile recorded"; tar -czf "$R/spread-files.tar.gz" -C "$O" .; exit 1; }
sess layers-1 none "$repeat"
sess spread-1 $m.prof "$repeat"
sess layers-2 none "$repeat"
sess spread-2 $m.prof "$repeat"
rm -f $m $m.prof
tar -czf "$R/spread-files.tar.gz" -C "$O" .
say "spread34 done"
