#!/usr/bin/env bash
# Session 37's second call (issue 18's limit): the DRAM probe with the CPU workers' kernels' software prefetch
# (read ahead) against its plain loads, from the repo root with the pack unpacked in $C (bin/, lib/, COMMIT):
#   C=/tmp/c bash bench/device/sess37b.sh [SECONDS] [ROUNDS] [SESSION_ROUNDS]
# 1. ROUNDS rounds of `guild bench bw --threads 15` in turns: plain / ahead, each over own slices and over shared
#    pieces of an expert matrix (1,020,000 bytes, as the sessions probe reads), before any model is written;
# 2. guild-mkmodel writes the Qwen3-30B-A3B shape; `guild bench experts --tokens 1,16` (the pipeline's own rate);
# 3. SESSION_ROUNDS rounds of `guild bench sessions --sessions 1,2,4,8,16 --repeat 5 --probes 1` at 8G, the
#    probe reading ahead (the default) then plain (--probe-read plain), pooled per probe afterwards. The
#    --probe-read flag existed at commit abb7505 only: later builds refuse it (their probe loads plain).
# Output under $OUT: sess37b.log and sess37b-files.tar.gz.
set -u
budget=${1:-400}
rounds=${2:-6}
srounds=${3:-2}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-sess37b-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/sess37b.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
say "sess37b: commit $commit; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
for r in $(seq 1 "$rounds"); do
    for read in plain ahead; do
        for piece in 0 1020000; do
            step 20 "bw $read piece $piece (round $r)" sh -c '"$0" "$@" | grep "^read"' "$B/guild" bench bw --gb 4 \
                --passes 5 --threads 15 --read $read --piece $piece
        done
    done
done 2>&1 | tee "$O/bw.txt" | grep -E "^read"
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { tar -czf "$R/sess37b-files.tar.gz" -C "$O" .; exit 1; }
for t in 1 16; do
    step 40 "bench experts --tokens $t" sh -c '"$0" "$@" > "'"$O"'/experts-'"$t"'.txt" 2>&1; st=$?;
        grep -E "^(# q4_K|q4_K)" "'"$O"'/experts-'"$t"'.txt"; exit $st' \
        "$B/guild" bench experts --shape qwen3-30b-a3b --type q4_K --down-type q6_K --tokens $t --threads 15 \
        --runs 5 --steps 48 --prefill 0
done
for r in $(seq 1 "$srounds"); do
    for read in ahead plain; do
        name=$read-$r
        step 85 "guild bench sessions 1-16 at 8G (probe $name)" \
            sh -c '"$0" "$@" > "'"$O"'/sessions-'"$name"'.txt" 2>&1; st=$?;
            grep -E "^(sessions| +[0-9]+ +[0-9])" "'"$O"'/sessions-'"$name"'.txt"; exit $st' \
            "$B/guild" bench sessions -m $m --gpu-mem 8G --sessions 1,2,4,8,16 --prompt 128 --gen 16 \
            --repeat 5 --probes 1 --probe-read $read --commit "$commit" --json "$O/sessions-$name.json"
    done
done
for read in ahead plain; do
    step 15 "guild bench pool (probe $read)" sh -c '"$0" "$@" 2>&1 | tail -n 8' "$B/guild" bench pool \
        $(ls "$O"/sessions-$read-*.json)
done
rm -f $m
tar -czf "$R/sess37b-files.tar.gz" -C "$O" .
say "sess37b done"
