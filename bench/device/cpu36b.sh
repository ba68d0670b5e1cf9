#!/usr/bin/env bash
# cpu36's second call (session 36, issues 17/18): the pool's hand-offs without the mutex (a job's wake and the
# last worker's signal to a spinning runner) against the old ones (--variant lockwake=1) and a 1 ms pool spin, in
# turns within each run of `guild bench experts`; then the engine with every expert in RAM (issue 17) and 16
# sessions at 8G (issue 18), this build's CPU worker against the baseline's (main 5657972), everything else the
# same binaries, alternating, with -v (this build's worker logs its pipeline's profile).
# From the repo root with the pack in $C (bin/, base/, lib/, tests/, COMMIT, BASE_COMMIT):
#   C=/tmp/c bash bench/device/cpu36b.sh [SECONDS] [quick]
# (quick: 2 threads, small runs, the demo model: a local check of the script, which without a GPU fails its engine
# steps and goes on)
# Output under $OUT: cpu36b.log and cpu36b-files.tar.gz (every run's whole output).
set -u
budget=${1:-225}
quick=()
shape=qwen3-30b-a3b
[ "${2:-}" = quick ] && quick=(--threads 2 --gb 0.3 --runs 2 --steps 4) && shape=demo
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=$C/base
R=${OUT:-/tmp/guild-out}
O=/tmp/cpu36b-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/cpu36b.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
# the two sides differ in the CPU worker only: this build's guild (the coordinator, whose code is the baseline's
# but for the pool and the benchmark) and the baseline's GPU worker and stager on both, packed once
for w in guild-gpu-worker guild-stager; do
    [ -x "$B/$w" ] || cp "$BASE/$w" "$B/$w"
done
[ -x "$BASE/guild" ] || cp "$B/guild" "$BASE/guild"
say "cpu36b: commit $(cat "$C/COMMIT" 2> /dev/null) base $(cat "$C/BASE_COMMIT" 2> /dev/null); $(nproc) CPUs"
finish() {
    rm -f /tmp/q30b.gguf
    tar -czf "$R/cpu36b-files.tar.gz" -C "$O" .
    say "cpu36b: done"
}
step 30 check_pool sh -c 'CK_DEFAULT_TIMEOUT=60 "$0" 2>&1 | tail -n 1' "$C/tests/check_pool"
common="--shape qwen3-30b-a3b --type q4_K --down-type q6_K --threads 14 --gb 2 --prefill 0 --profile"
V=(--variant lockwake=1 --variant spin=1000 --variant threads=15 --variant threads=16)
n=0
ex() { # LIMIT NAME ARGS...
    lim=$1 name=$2
    shift 2
    n=$((n + 1))
    f=$(printf '%s/%02d-%s.txt' "$O" "$n" "$name")
    step "$lim" "$name" sh -c '"$0" "$@" > "'"$f"'" 2>&1; st=$?; grep -E "^(q4_K|profile|variant)" "'"$f"'"; exit $st' \
        "$B/guild" bench experts $common "$@" "${quick[@]}"
}
ex 15 t1 --tokens 1 --runs 9 --steps 100 "${V[@]}"
ex 20 t8r --tokens 8 --routing random --runs 9 --steps 40 "${V[@]}"
ex 25 t16r --tokens 16 --routing random --runs 9 --steps 32 "${V[@]}"
m=/tmp/q30b.gguf
step 80 "write the model" "$B/tools/guild-mkmodel" --shape $shape --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || { say "no model"; finish; exit 1; }
bin_of() { case $1 in base*) echo "$BASE" ;; *) echo "$B" ;; esac; }
ram() { # SIDE [FLAGS...]
    side=$1
    shift
    step 30 "experts in RAM decode ($side $*)" sh -c '"$0" "$@" > "'"$O"'/ram-'"$side"'.txt" 2>&1; st=$?;
        grep -E "run [0-9]:|^ +512 |pipeline profile" "'"$O"'/ram-'"$side"'.txt" | tail -n 8; exit $st' \
        "$(bin_of $side)/guild" bench run -m $m --populate 512 --gen 48 --runs 3 --threads 14 --gpu-experts none -v \
        --json "$O/ram-$side.json" "$@"
}
ram new
ram base
sess() { # SIDE [FLAGS...]
    side=$1
    shift
    step 45 "guild bench sessions 16 at 8G ($side $*)" sh -c '"$0" "$@" > "'"$O"'/sessions-'"$side"'.txt" 2>&1; st=$?;
        sed -n "/^# paired: each/,\$p" "'"$O"'/sessions-'"$side"'.txt"; grep "pipeline profile" "'"$O"'/sessions-'"$side"'.txt" | tail -n 4;
        exit $st' \
        "$(bin_of $side)/guild" bench sessions -m $m --gpu-mem 8G --threads 14 --sessions 16 --prompt 128 --gen 16 \
        --repeat 6 --probes 1 -v --json "$O/sessions-$side.json" "$@"
}
sess new
sess base
# the CPU worker's main thread spinning on the exchange's doorbell through the gap too (default 50 us)
sess new-spin1000 --spin-us 1000
ram new-spin1000 --spin-us 1000
ram new2
ram base2
finish
