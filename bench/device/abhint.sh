#!/usr/bin/env bash
# Session 33 (issue 18): does the prefetch hint for batched decode steps (8 and 16 sessions, new in this session)
# help? Rounds of `guild bench sessions --sessions 1,8,16` at --gpu-mem 8G, interleaved: the tip with its default
# hint (--prefetch-experts 4), the tip with none (--prefetch-experts 0), and the session's start (hints for up to
# 4 tokens only: none at these sizes), the order rotated each round. Usage: C=/tmp/c bash abhint.sh [SECONDS]
# [ROUNDS] (the lead.sh pack: bin/, base/). Output under $OUT: abhint.log and abhint-files.tar.gz.
set -u
# shellcheck disable=SC2034 # lib.sh's step reads t0 and budget
t0=$(date +%s) budget=${1:-180}
rounds=${2:-2}
C=${C:-/tmp/c}
B=$C/bin
export LD_LIBRARY_PATH=$C/lib
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-abhint-out
rm -rf "$O"
mkdir -p "$R" "$O"
exec > >(tee -a "$R/abhint.log") 2>&1
. bench/device/lib.sh # say, step
say "commit $(cat "$C/COMMIT" 2> /dev/null) base $(cat "$C/BASE_COMMIT" 2> /dev/null)"
m=/tmp/q30b.gguf
step 60 "guild-mkmodel" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || { say "no model"; exit 1; }
one() { # TAG BINDIR PREFETCH ROUND
    pf=--prefetch-experts=$3 # shellcheck disable=SC2086 # (below: no word when empty)
    [ "$1" = base ] && pf= # the session's start: no such flag there (its default 4)
    step 45 "sessions 1,8,16: $1 (round $4)" sh -c '"$0" "$@" > "'"$O"'/s-'"$1-$4"'.txt" 2>&1; st=$?;
        sed -n "/^# paired: each/,/^# strict/p" "'"$O"'/s-'"$1-$4"'.txt" | grep -E "^ +[0-9]"; exit $st' \
        "$2/guild" bench sessions -m $m --gpu-mem 8G --threads 14 --sessions 1,8,16 --prompt 128 --gen 16 \
        --repeat 3 --probes 1 $pf --json "$O/s-$1-$4.json"
}
for r in $(seq 1 "$rounds"); do
    case $((r % 3)) in
    1) one hint "$B" 4 "$r"; one nohint "$B" 0 "$r"; one base "$C/base" 4 "$r" ;;
    2) one nohint "$B" 0 "$r"; one base "$C/base" 4 "$r"; one hint "$B" 4 "$r" ;;
    *) one base "$C/base" 4 "$r"; one hint "$B" 4 "$r"; one nohint "$B" 0 "$r" ;;
    esac
done
rm -f $m
tar -czf "$R/abhint-files.tar.gz" -C "$O" .
say "abhint done"
