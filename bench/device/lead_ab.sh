#!/usr/bin/env bash
# A session's second consolidated call, for two numbers one call of lead.sh leaves noisy: rounds of the tip and
# the session's start interleaved (the order flipped each round, so the VM's memory phase falls on both sides) of
# (a) decode at --gpu-mem 8G with a routing profile the tip records (issue 14's >= 95 tok/s, the hit rate printed)
# and (b) `guild bench sessions --sessions 16` at 8G (issue 18's largest batch: decode tok/s, the rate the CPU
# workers' waits read at, the step outside the wait). Meanwhile the bit cases of check_cuda_expert_mma run (their
# timing cases are measurements, over alltests.sh's step limit). Same pack as lead.sh, from the repo root:
#   C=/tmp/c bash bench/device/lead_ab.sh [SECONDS] [ROUNDS]
# Output under $OUT: lead_ab.log (a summary of medians at its end) and lead_ab-files.tar.gz.
set -u
budget=${1:-230}
rounds=${2:-2}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib CK_DEFAULT_TIMEOUT=300
B=$C/bin
BASE=$C/base
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-lead-ab-out # (emptied: a warm machine keeps /tmp between calls)
rm -rf "$O"
mkdir -p "$R" "$O"
exec > >(tee -a "$R/lead_ab.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step, prompt8, run8
say "lead_ab: commit $(cat "$C/COMMIT" 2> /dev/null) base $(cat "$C/BASE_COMMIT" 2> /dev/null); $rounds rounds"
m=/tmp/q30b.gguf
(timeout -s KILL 80 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o $m \
    > "$O/mk.txt" 2>&1
    echo "mkmodel rc=$?" >> "$O/mk.txt") &
pids=$!
for c in bits "dense bits" "few bits"; do
    (timeout -s KILL 90 env CK_RUN_CASE="$c" "$B/tests/cuda/check_cuda_expert_mma" > "$O/mma-${c// /_}.txt" 2>&1
        echo "rc=$? (check_cuda_expert_mma $c)" >> "$O/mma-${c// /_}.txt") &
    pids="$pids $!"
done
# shellcheck disable=SC2086 # these jobs alone: a bare wait also waits for the log's tee, which never ends
wait $pids
for f in "$O"/mma-*.txt; do grep -hE "^[0-9]+%: Checks|^rc=" "$f"; done
cat "$O/mk.txt"
grep -q "mkmodel rc=0" "$O/mk.txt" || { tar -czf "$R/lead_ab-files.tar.gz" -C "$O" .; exit 1; }
bin_of() { case $1 in base) echo "$BASE" ;; *) echo "$B" ;; esac; }
prompt8 "$O/prompt.txt" # session 26's text prompt (lead.sh's)
# (--routing none: whole layers resident, lead.sh's sessions table; the profile recorded below lies beside the
# model, where the bench would find it and plan hot experts in every layer, which session 31's rounds did)
sess16() { # FILE-NAME BINDIR
    step 30 "sessions 16 at 8G $1" sh -c '"$0" "$@" > "'"$O"'/s-'"$1"'.txt" 2>&1; st=$?;
        grep -E "^ +16 " "'"$O"'/s-'"$1"'.txt"; exit $st' \
        "$2/guild" bench sessions -m $m --gpu-mem 8G --routing none --threads 14 --sessions 16 --prompt 128 --gen 16 \
        --repeat 3 --probes 1 --json "$O/s-$1.json"
}
run8 record "$B" --record-routing $m.routing
[ -f $m.routing ] || { say "no routing profile recorded"; tar -czf "$R/lead_ab-files.tar.gz" -C "$O" .; exit 1; }
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then order="new base"; else order="base new"; fi
    for side in $order; do run8 "$side-$r" "$(bin_of $side)" --routing $m.routing; done
    for side in $order; do sess16 "$side-$r" "$(bin_of $side)"; done
done
say "medians (new | base)"
for side in new base; do
    d=$(grep -h "decode:" "$O"/r-$side-*.txt 2> /dev/null | sed -E 's/.*\(([0-9.]+) tok\/s\).*/\1/' | sort -n | tr '\n' ' ')
    s=$(for f in "$O"/s-$side-*.txt; do grep -m1 -E "^ +16 " "$f" | awk '{print $2}'; done 2> /dev/null |
        sort -n | tr '\n' ' ')
    echo "$side: 8G profile decode tok/s: $d| 16 sessions tok/s: $s"
done
rm -f $m $m.routing
tar -czf "$R/lead_ab-files.tar.gz" -C "$O" .
say "lead_ab done"
