# Sourced by the bench/device/*.sh scripts (a device call has a budget of seconds and must never hang):
#   say TEXT...             a timestamped line, with the seconds since t0
#   step LIMIT NAME CMD...  runs CMD under `timeout -s KILL LIMIT` and prints its exit status, or says it is
#                           skipped when LIMIT more seconds would go past the budget
#   prof NAME FLAGS...      bench/guild-cuda-prof on the model $m (32 decode steps, 14 threads) as a step of 60 s,
#                           its report in $O/prof-NAME.txt and on stdout
# The caller sets t0 (date +%s at its start) and budget (seconds); for prof, B (the packed bin folder), O (the
# output folder) and m (the model).
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
