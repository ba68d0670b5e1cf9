#!/usr/bin/env bash
# Issues 17/18: where the CPU expert pipeline's read rate goes (session 36, cpu36). `guild bench experts` at the
# Qwen3-30B-A3B shape (Q4_K gate/up, Q6_K down, 14 threads) with --profile, and settings measured as --variant arms
# in turns with the default within every run (thread counts, claim sizes, fixed blocks, preferred slices, the
# pool's old wake through its mutex), at 1 token and 4/8/16 tokens (shared experts: --routing random; and the
# all-distinct default); then with the engine's gap between layers (--gap-us: the pool idle meanwhile) and the
# pool's spin for 1 and 3 ms; then the baseline binary against this one, alternating, at 1 and 16 tokens.
# From the repo root with the pack in $C (bin/guild, base/guild, lib/, tests/, COMMIT, BASE_COMMIT):
#   C=/tmp/c bash bench/device/cpu36.sh [SECONDS] [quick]
# (quick: 2 threads, 0.3 GB, 2 runs of 4 steps each: a local check of the script)
# Output under $OUT: cpu36.log (the result lines) and raw/ (each run's whole output).
set -u
budget=${1:-225}
quick=()
[ "${2:-}" = quick ] && quick=(--threads 2 --gb 0.3 --runs 2 --steps 4)
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
R=${OUT:-/tmp/guild-out}
mkdir -p "$R/raw"
exec > >(tee -a "$R/cpu36.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "cpu36: commit $(cat "$C/COMMIT" 2> /dev/null) base $(cat "$C/BASE_COMMIT" 2> /dev/null); $(nproc) CPUs"
lscpu > "$R/raw/lscpu.txt" 2>&1
grep -E "Model name|^CPU\(s\)|Thread|Core|L2|L3|MHz" "$R/raw/lscpu.txt"
cat /sys/kernel/mm/transparent_hugepage/enabled 2> /dev/null
common="--shape qwen3-30b-a3b --type q4_K --down-type q6_K --threads 14 --gb 2 --prefill 0"
n=0
# ex LIMIT NAME BIN ARGS...: one bench run, its output in raw/NN-NAME.txt, its result lines here
ex() {
    lim=$1 name=$2 bin=$3
    shift 3
    n=$((n + 1))
    f=$(printf '%s/raw/%02d-%s.txt' "$R" "$n" "$name")
    step "$lim" "$name" sh -c '"$0" "$@" > "'"$f"'" 2>&1; st=$?; grep -E "^(q4_K|profile|variant)|read probe|plain byte|in turns" "'"$f"'"; exit $st' \
        "$bin" bench experts $common "$@" "${quick[@]}"
}
# the unit tests of the changed code on this CPU (AMX kernels, 16 CPUs): bits and the pool's waits
for t in check_pool check_expert_pipe check_expert_share; do
    [ -x "$C/tests/$t" ] && step 40 "$t" sh -c 'CK_DEFAULT_TIMEOUT=120 "$0" 2>&1 | tail -n 3' "$C/tests/$t"
done
V=(--variant lockwake=1 --variant min=64 --variant min=256 --variant guide=1 --variant guide=4
    --variant gu=768,down=2048 --variant prefer=1 --variant threads=16)
[ "${2:-}" = quick ] && V=(--variant lockwake=1 --variant min=64 --variant prefer=1 --variant threads=1)
# 1. where the time goes, and the settings in turns with the default
ex 25 prof-t1 "$B/guild" --tokens 1 --runs 9 --steps 100 --profile "${V[@]}"
ex 25 prof-t4r "$B/guild" --tokens 4 --routing random --runs 9 --steps 48 --profile "${V[@]}"
ex 30 prof-t8r "$B/guild" --tokens 8 --routing random --runs 9 --steps 40 --profile "${V[@]}"
ex 35 prof-t16r "$B/guild" --tokens 16 --routing random --runs 9 --steps 32 --profile "${V[@]}"
ex 40 prof-t16d "$B/guild" --tokens 16 --runs 9 --steps 24 --profile "${V[@]}"
# 2. the engine's gap between layers (the dense step): the pool idle, its threads asleep after their spins
G=(--variant spin=1000 --variant spin=3000 --variant lockwake=1)
ex 20 gap50-t1 "$B/guild" --tokens 1 --gap-us 50 --runs 9 --steps 100 --profile "${G[@]}"
ex 20 gap150-t1 "$B/guild" --tokens 1 --gap-us 150 --runs 9 --steps 100 --profile "${G[@]}"
ex 20 gap400-t1 "$B/guild" --tokens 1 --gap-us 400 --runs 9 --steps 100 --profile "${G[@]}"
ex 25 gap150-t16r "$B/guild" --tokens 16 --routing random --gap-us 150 --runs 9 --steps 24 --profile "${G[@]}"
ex 25 gap400-t16r "$B/guild" --tokens 16 --routing random --gap-us 400 --runs 9 --steps 24 --profile "${G[@]}"
# 3. the baseline binary (main 5657972: the same pipeline and kernels, the pool's old wake) against this one,
# alternating; neither profiled nor with variants (the baseline has neither)
for rep in 1 2; do
    for side in new base; do
        bin="$B/guild"
        [ $side = base ] && bin="$C/base/guild"
        ex 15 ab-t1-$side$rep "$bin" --tokens 1 --runs 9 --steps 100
        ex 20 ab-t16-$side$rep "$bin" --tokens 16 --runs 7 --steps 24
    done
done
say "cpu36: done"
