#!/usr/bin/env bash
# Session 38's first call (issue 18): the prefetch hint for batched decode steps by its own rule (the experts most
# tokens route to; their down rows not pinned), from the repo root with the pack unpacked in $C (bin/, lib/,
# tests/, COMMIT, base/ with main 7abef70's guild, workers and stager, BASE_COMMIT):
#   C=/tmp/c bash bench/device/sess38a.sh [SECONDS] [REPEAT]
# 1. the CPU side alone: `guild bench experts` at the Qwen3-30B-A3B shape, 15 threads, 16 and 8 random tokens with
#    a 120 us gap (about the engine's dense step at 16 rows), the hint with a perfect prediction as --variant arms
#    (hint=4, 8, 16; hint=4 with the down rows pinned as session 33's), and 1 token with a 50 us gap (the hint as
#    decode has it today);
# 2. guild-mkmodel writes the Qwen3-30B-A3B shape; `guild bench sessions --sessions 1,8,16 --repeat REPEAT` at 8G
#    in turns: new (default hint: 4), base (no hint past 4 tokens), new with --prefetch-experts 8, then again.
# Output under $OUT: sess38a.log and sess38a-files.tar.gz.
set -u
budget=${1:-330}
repeat=${2:-5}
. bench/device/lib.sh # say, step, setup, finish
setup sess38a
for t in tests/check_expert_pipe tests/check_ipc; do
    [ -x "$B/$t" ] && step 60 "$t" sh -c '"$0" > "'"$O"'/$(basename "$0").txt" 2>&1; st=$?;
        tail -n 1 "'"$O"'/$(basename "$0").txt"; exit $st' "$B/$t"
done
common="--shape qwen3-30b-a3b --type q4_K --down-type q6_K --threads 15 --gb 2 --prefill 0"
ex() { # LIMIT NAME ARGS...: one bench experts run, its output in O/NAME.txt, its result lines here
    lim=$1 name=$2
    shift 2
    step "$lim" "bench experts $name" sh -c '"$0" "$@" > "'"$O"'/'"$name"'.txt" 2>&1; st=$?;
        grep -E "^(q4_K|variant)|read probe" "'"$O"'/'"$name"'.txt"; exit $st' "$B/guild" bench experts $common "$@"
}
H=(--variant hint=4 --variant hint=8 --variant hint=16 --variant hint=4,pindown=16)
ex 40 t16-gap120 --tokens 16 --routing random --gap-us 120 --runs 9 --steps 32 "${H[@]}"
ex 35 t8-gap120 --tokens 8 --routing random --gap-us 120 --runs 9 --steps 40 "${H[@]}"
ex 25 t1-gap50 --tokens 1 --gap-us 50 --runs 9 --steps 100 --variant hint=4 --variant hint=8
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish sess38a; exit 1; }
for r in 1 2; do
    for side in new base new-pf8; do
        name=$side-$r bin=$B extra=() c=$commit
        [ $side = base ] && bin=$BASE c=$base_commit
        [ $side = new-pf8 ] && extra=(--prefetch-experts 8)
        step $((20 + 9 * repeat)) "guild bench sessions 1,8,16 at 8G ($name)" \
            sh -c '"$0" "$@" > "'"$O"'/sessions-'"$name"'.txt" 2>&1; st=$?;
            grep -E "^(sessions| +[0-9]+ +[0-9])" "'"$O"'/sessions-'"$name"'.txt"; exit $st' \
            "$bin/guild" bench sessions -m $m --gpu-mem 8G --sessions 1,8,16 --prompt 128 --gen 16 \
            --repeat "$repeat" --probes 1 --commit "$c" --json "$O/sessions-$name.json" "${extra[@]}"
    done
done
rm -f $m
finish sess38a
