# Sourced by the decode-kernel A/B scripts (router.sh, fuse2.sh, experts2.sh, attn.sh, stepgap.sh): one build
# against a baseline in one device call, on guild-mkmodel's Qwen3-30B-A3B shape. Sources lib.sh (say, step).
#   ab_open NAME            unpacks $C/c.tar.xz into /tmp/guild-NAME (bin/, lib/, COMMIT, base/ with BASE_COMMIT),
#                           sets P, B (bin), R ($OUT), O (scratch), commit, base_commit, m (the model's path),
#                           t0 (unless set), logs everything to $R/NAME.log, prints the device line
#   ab_tests LIMIT T...     starts the CUDA test programs T (tests/cuda/T) at once in the background, each under
#                           its LIMIT, their logs in $O/T.log; ab_pids holds their pids
#   ab_report T...          after `wait $ab_pids`: each test's Checks line and exit status
#   ab_model LIMIT          writes the model $m (Q4_K_M recipe, --fill pool) as a step
#   ab_prof NAME PROFILER LIMIT FLAGS...   guild-cuda-prof (32 steps at 512 populated positions), its report from
#                           the line starting with $AB_PROF_FROM (default "step clock") printed
#   ab_bench NAME BINDIR LIMIT FLAGS...    `guild bench run` at 512 populated positions, $AB_GEN (default 64)
#                           tokens, 3 runs, its JSON in $O/NAME.json
#   ab_greedy NAME BINDIR LIMIT            64 greedy ids of a repetitive prompt, all on the GPU, into $O/NAME.ids
#   ab_same A B LABEL       says whether ids files $O/A.ids and B (a path) are equal, when both exist
#   ab_close NAME           $R/NAME-files.tar.gz of $O (a call returns 8 files at most), then "done"
# The caller sets budget (seconds) and C (the pack's folder) first.
. bench/device/lib.sh
ab_open() { # NAME
    P=/tmp/guild-$1
    mkdir -p "$P" && tar -C "$P" -xJf "$C/c.tar.xz"
    export LD_LIBRARY_PATH=$P/lib
    B=$P/bin
    R=${OUT:-/tmp/guild-out}
    O=/tmp/guild-$1-out
    m=/tmp/q30b.gguf
    mkdir -p "$R" "$O"
    commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
    base_commit=$(cat "$P/BASE_COMMIT" "$P/base/BASE_COMMIT" 2> /dev/null | head -1)
    base_commit=${base_commit:-unknown}
    exec > >(tee -a "$R/$1.log") 2>&1
    t0=${t0:-$(date +%s)}
    say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1);" \
        "$(nproc) CPUs; $(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
}
ab_tests() { # LIMIT T...
    local lim=$1 t
    shift
    ab_pids=
    for t in "$@"; do
        (timeout -s KILL "$lim" "$B/tests/cuda/$t" > "$O/$t.log" 2>&1; echo "rc=$? ($t)" >> "$O/$t.log") &
        ab_pids="$ab_pids $!"
    done
}
ab_report() { # T...
    local t
    for t in "$@"; do
        say "$t: $(grep -E '^[0-9]+%: Checks' "$O/$t.log" | tail -1) $(tail -1 "$O/$t.log")"
    done
}
ab_model() { # LIMIT
    step "$1" "model: Qwen3-30B-A3B shape, Q4_K_M recipe, --fill pool" "$B/tools/guild-mkmodel" \
        --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o "$m"
}
ab_prof() { # NAME PROFILER LIMIT FLAGS...
    local name=$1 pr=$2 lim=$3
    shift 3
    step "$lim" "guild-cuda-prof $name: $*" sh -c '"$0" "$@" > "'"$O/prof-$name.txt"'" 2>&1; st=$?;
        sed -n "/^'"${AB_PROF_FROM:-step clock}"'/,\$p" "'"$O/prof-$name.txt"'"; exit $st' \
        "$pr" -m "$m" --steps 32 --threads 14 --populate 512 "$@"
}
ab_bench() { # NAME BINDIR LIMIT FLAGS...
    local name=$1 dir=$2 lim=$3
    shift 3
    step "$lim" "bench run $name: $*" sh -c '"$0" "$@" > "'"$O/$name.out"'" 2>&1; st=$?;
        grep -i "decode" "'"$O/$name.out"'" | tail -5; exit $st' \
        "$dir/guild" bench run -m "$m" --populate 512 --gen "${AB_GEN:-64}" --runs 3 --json "$O/$name.json" "$@"
}
ab_greedy() { # NAME BINDIR LIMIT
    local name=$1 dir=$2 lim=$3
    [ -s /tmp/rep.txt ] || for i in $(seq 1 40); do printf 'one two three four five, '; done > /tmp/rep.txt
    step "$lim" "guild run $name" sh -c '"$0" "$@" > /dev/null 2> "'"$O/$name.log"'"; st=$?;
        grep "decode:\|prefill:" "'"$O/$name.log"'"; exit $st' \
        "$dir/guild" run -m "$m" -f /tmp/rep.txt -n 64 --temp 0 --ignore-eos --threads 14 --ctx 1024 \
        --backend cuda --single-process --ids-out "$O/$name.ids"
}
ab_same() { # A B LABEL
    [ -s "$O/$1.ids" ] && [ -s "$2" ] &&
        { cmp -s "$O/$1.ids" "$2" && say "greedy ids: $3 equal" || say "greedy ids: $3 DIFFER"; }
}
ab_close() { # NAME
    tar -czf "$R/$1-files.tar.gz" -C "$O" .
    say done
}
