#!/usr/bin/env bash
# Session 37's third call (issue 18's limit): does the DRAM probe's rate depend on how much memory it reads? The
# CPU workers' expert store is ~11.5 GB; the sessions probe read 4 GB. From the repo root with the pack in $C:
#   C=/tmp/c bash bench/device/sess37c.sh [SECONDS] [ROUNDS] [SESSION_ROUNDS]
# 1. ROUNDS rounds of `guild bench bw --threads 15 --piece 1020000` (plain loads, shared memory, as the sessions
#    probe reads) at --gb 4, 12 and 24 in turns, before any model is written;
# 2. guild-mkmodel writes the Qwen3-30B-A3B shape;
# 3. SESSION_ROUNDS rounds of `guild bench sessions --sessions 1,2,4,8,16 --repeat 5 --probes 1` at 8G with
#    --probe-gb 12 then 4, pooled per probe size afterwards.
# Output under $OUT: sess37c.log and sess37c-files.tar.gz.
set -u
budget=${1:-300}
rounds=${2:-5}
srounds=${3:-2}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-sess37c-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/sess37c.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
say "sess37c: commit $commit; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
free -g | head -2
for r in $(seq 1 "$rounds"); do
    for gb in 4 12 24; do
        step 30 "bw --gb $gb (round $r)" sh -c '"$0" "$@" | grep "^read" | sed "s/^/gb='"$gb"' /"' "$B/guild" bench bw \
            --gb $gb --passes 5 --threads 15 --piece 1020000
    done
done 2>&1 | tee "$O/bw.txt" | grep -E "^gb="
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { tar -czf "$R/sess37c-files.tar.gz" -C "$O" .; exit 1; }
for r in $(seq 1 "$srounds"); do
    for gb in 12 4; do
        name=p$gb-$r
        step 85 "guild bench sessions 1-16 at 8G (--probe-gb $gb, round $r)" \
            sh -c '"$0" "$@" > "'"$O"'/sessions-'"$name"'.txt" 2>&1; st=$?;
            grep -E "^(sessions| +[0-9]+ +[0-9])" "'"$O"'/sessions-'"$name"'.txt"; exit $st' \
            "$B/guild" bench sessions -m $m --gpu-mem 8G --sessions 1,2,4,8,16 --prompt 128 --gen 16 \
            --repeat 5 --probes 1 --probe-gb $gb --commit "$commit" --json "$O/sessions-$name.json"
    done
done
for gb in 12 4; do
    step 15 "guild bench pool (--probe-gb $gb)" sh -c '"$0" "$@" 2>&1 | tail -n 7' "$B/guild" bench pool \
        $(ls "$O"/sessions-p$gb-*.json)
done
rm -f $m
tar -czf "$R/sess37c-files.tar.gz" -C "$O" .
say "sess37c done"
