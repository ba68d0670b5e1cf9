# Sourced by the bench/device/*.sh scripts (a device call has a budget of seconds and must never hang):
#   say TEXT...             a timestamped line, with the seconds since t0
#   step LIMIT NAME CMD...  runs CMD under `timeout -s KILL LIMIT` and prints its exit status, or says it is
#                           skipped when LIMIT more seconds would go past the budget
#   prof NAME FLAGS...      bench/guild-cuda-prof on the model $m (32 decode steps, 14 threads) as a step of 60 s,
#                           its report in $O/prof-NAME.txt and on stdout
#   prompt8 FILE            session 26's text prompt (~3,000 tokens of guild-mkmodel's vocabulary) into FILE
#   run8 NAME BINDIR FLAGS...  BINDIR's guild run of $O/prompt.txt on the model $m at --gpu-mem 8G, 64 greedy
#                           tokens with --stats, as a step of 25 s: its stderr in $O/r-NAME.txt, the decode and
#                           hit-rate lines on stdout (issue 14's decode with a routing profile: lead.sh, lead_ab.sh)
# The caller sets t0 (date +%s at its start) and budget (seconds); for prof, B (the packed bin folder), O (the
# output folder) and m (the model); for run8, O and m.
say() { echo "== $(date -u +%T) +$(($(date +%s) - t0))s $*"; }
step() { # LIMIT NAME CMD...
    lim=$1 name=$2
    shift 2
    if [ $(($(date +%s) - t0 + lim)) -gt "$budget" ]; then
        say "skipped (needs $lim s): $name"
        return 0
    fi
    say "$name"
    timeout -s KILL "$lim" "$@"
    echo "rc=$? ($name)"
}
prof() { # NAME FLAGS...
    name=$1
    shift
    step 60 "guild-cuda-prof $name: $*" sh -c '"$0" "$@" > "'"$O/prof-$name.txt"'"; st=$?; cat "'"$O/prof-$name.txt"'"; exit $st' \
        "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 "$@"
}
prompt8() { # FILE
    for i in $(seq 1 55); do
        printf 'The quick brown fox %d jumps over the lazy dog while the committee reviews chapter %d of the report. ' \
            "$i" "$i"
    done > "$1"
}
run8() { # NAME BINDIR FLAGS...: 64 greedy tokens of the prompt at --gpu-mem 8G with --stats
    n=$1 bin=$2
    shift 2
    step 25 "run 8G $n" sh -c 'g=$0 m=$1; shift; "$g" run -m "$m" -f "'"$O"'/prompt.txt" -n 64 --temp 0 \
        --threads 14 --ctx 4096 --batch 4096 --backend cuda --gpu-mem 8G --stats "$@" 2> "'"$O"'/r-'"$n"'.txt" \
        > /dev/null; st=$?; grep -i "hit rate\|decode:" "'"$O"'/r-'"$n"'.txt" | grep -v "^stats: layer"; exit $st' \
        "$bin/guild" $m "$@"
}
