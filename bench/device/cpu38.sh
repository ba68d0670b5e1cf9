#!/usr/bin/env bash
# Issue 18 (session 38, cpu38): the packed AVX-512 kernels' software prefetch under load. `guild bench experts`
# at the Qwen3-30B-A3B shape (Q4_K gate/up, Q6_K down, packed), 15 threads, batched-decode routing (--routing
# random), with prefetch schemes as --variant arms in turns with the default (2 records ahead, prefetcht1) within
# every run: set A the distance (0 = none, 1, 3, 4, 6 records) and the hint at 2 (t0, nta); set B more hints
# and pairs (t2; t0 and nta at 1 and 4; nta at 3; 8 records); at 16, 8 and 1 tokens; then set C, the three best
# arms of A and B at 16 + 8 tokens, in fresh runs at 16, 8 and 1 tokens, and at 16 and 8 again while the budget
# lasts. First the bit checks of the changed kernels on this CPU (check_pack: every scheme at
# 1-16 tokens; check_kernels, check_expert_pipe unchanged).
# The pfahead/pfhint arms and check_pack's scheme case need the build of branch cpu38's f387f0f (the setting was
# reverted after the measurement: bench/results/cpu38-h200-2026-12-04-s38.md).
# From the repo root with the pack in $C (bin/guild, bin/tests/check_{kernels,expert_pipe,pack}, lib/, COMMIT):
#   C=/tmp/c bash bench/device/cpu38.sh [SECONDS] [quick]
# (quick: 2 threads, 0.3 GB, 2 runs of 4 steps: a local check of the script)
# Output under $OUT: cpu38.log (the result lines) and cpu38-raw.tar.gz (each run's whole output, lscpu).
set -u
budget=${1:-320}
quick=()
[ "${2:-}" = quick ] && quick=(--threads 2 --gb 0.3 --runs 2 --steps 4)
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
R=${OUT:-/tmp/guild-out}
O=/tmp/cpu38-raw
mkdir -p "$R" "$O"
exec > >(tee -a "$R/cpu38.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "cpu38: commit $(cat "$C/COMMIT" 2> /dev/null); $(nproc) CPUs"
lscpu > "$O/lscpu.txt" 2>&1
grep -E "Model name|^CPU\(s\)|Thread|Core|L1d|L2|L3|MHz" "$O/lscpu.txt"
finish() {
    tar -czf "$R/cpu38-raw.tar.gz" -C "$O" .
    say "cpu38: done"
}
for t in check_pack check_kernels check_expert_pipe; do
    step 60 "$t" sh -c 'CK_DEFAULT_TIMEOUT=120 "$0" 2>&1 | tail -n 3' "$B/tests/$t"
done
common="--shape qwen3-30b-a3b --type q4_K --down-type q6_K --threads 15 --gb 2 --prefill 0 --routing random"
n=0
ex() { # LIMIT NAME ARGS...: one bench run, its output in $O/NN-NAME.txt, its result lines here
    lim=$1 name=$2
    shift 2
    n=$((n + 1))
    f=$(printf '%s/%02d-%s.txt' "$O" "$n" "$name")
    step "$lim" "$name" sh -c '"$0" "$@" > "'"$f"'" 2>&1; st=$?; grep -E "^(q4_K|variant)|read probe|in turns" "'"$f"'"; exit $st' \
        "$B/guild" bench experts $common "$@" "${quick[@]}"
}
A=(--variant pfahead=0 --variant pfahead=1 --variant pfahead=3 --variant pfahead=4 --variant pfahead=6
    --variant pfhint=t0 --variant pfhint=nta)
Bv=(--variant pfhint=t2 --variant pfahead=1,pfhint=t0 --variant pfahead=4,pfhint=t0 --variant pfahead=1,pfhint=nta
    --variant pfahead=4,pfhint=nta --variant pfahead=8 --variant pfahead=3,pfhint=nta)
# steps per turn: ~0.1 s of pipeline an arm's turn at 16 and 8 tokens, ~0.04 s at 1
ex 40 A-t16 --tokens 16 --runs 15 --steps 48 "${A[@]}"
ex 40 B-t16 --tokens 16 --runs 15 --steps 48 "${Bv[@]}"
ex 35 A-t8 --tokens 8 --runs 15 --steps 64 "${A[@]}"
ex 35 B-t8 --tokens 8 --runs 15 --steps 64 "${Bv[@]}"
ex 30 A-t1 --tokens 1 --runs 15 --steps 160 "${A[@]}"
ex 30 B-t1 --tokens 1 --runs 15 --steps 160 "${Bv[@]}"
# C: the three arms of A and B with the highest ratio at 16 plus 8 tokens, again in fresh runs (the best of 14
# noisy ratios is biased up; these runs are not)
top=$(cat "$O"/0[1-4]-[AB]-t*.txt 2> /dev/null | awk '/^variant /{ split($4, t, "="); for (i = 6; i <= NF; i++)
        if ($i ~ /^ratio=/) { split($i, r, "="); if (t[2] == 16 || t[2] == 8) s[$2] += r[2] } }
        END { for (a in s) print s[a], a }' | sort -rn | head -n 3 | awk '{print $2}')
say "C: the arms $(echo $top)"
Cv=()
for a in $top; do Cv+=(--variant "$a"); done
ex 35 C-t16 --tokens 16 --runs 21 --steps 48 "${Cv[@]}"
ex 30 C-t8 --tokens 8 --runs 21 --steps 64 "${Cv[@]}"
ex 25 C-t1 --tokens 1 --runs 21 --steps 160 "${Cv[@]}"
ex 35 C-t16-again --tokens 16 --runs 21 --steps 48 "${Cv[@]}"
ex 30 C-t8-again --tokens 8 --runs 21 --steps 64 "${Cv[@]}"
finish
