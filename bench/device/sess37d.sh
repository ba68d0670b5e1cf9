#!/usr/bin/env bash
# Session 37's last call (issue 18's 16 sessions): do the CPU workers lose time waking between layers? At 16 rows the
# GPU's part of a layer outlasts the doorbell's 50 us spin, so the worker sleeps and is woken every layer. In turns:
# the default and --spin-us 400, 16 sessions at 8G, each with the workers' -v profile lines (doorbell and pool sleeps).
#   C=/tmp/c bash bench/device/sess37d.sh [SECONDS] [ROUNDS]
# Output under $OUT: sess37d.log and sess37d-files.tar.gz.
set -u
budget=${1:-150}
rounds=${2:-2}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-sess37d-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/sess37d.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
say "sess37d: commit $commit; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { tar -czf "$R/sess37d-files.tar.gz" -C "$O" .; exit 1; }
for r in $(seq 1 "$rounds"); do
    for spin in 50 400; do
        name=spin$spin-$r
        step 40 "guild bench sessions 16 at 8G (--spin-us $spin, round $r)" \
            sh -c '"$0" "$@" > "'"$O"'/sessions-'"$name"'.txt" 2> "'"$O"'/sessions-'"$name"'.err"; st=$?;
            grep -E "^(sessions| +[0-9]+ +[0-9])" "'"$O"'/sessions-'"$name"'.txt";
            grep -o "work=[0-9.]*\|doorbell_sleeps=[0-9.]* an exchange\|pool_sleeps=[0-9.]* a run" \
                "'"$O"'/sessions-'"$name"'.err" | paste -sd" " | cut -c1-400; exit $st' \
            "$B/guild" bench sessions -m $m --gpu-mem 8G --sessions 16 --prompt 128 --gen 16 --repeat 5 --probes 1 \
            --spin-us $spin -v --commit "$commit" --json "$O/sessions-$name.json"
    done
done
rm -f $m
tar -czf "$R/sess37d-files.tar.gz" -C "$O" .
say "sess37d done"
