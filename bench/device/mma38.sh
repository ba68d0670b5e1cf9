#!/usr/bin/env bash
# Session 38's call for the GPU-resident routed experts' tensor-core kernel (expert_pair_mma.cu's staged form; the
# call timed build de41320's 16-row tiles a warp, not kept), from the repo root with the pack unpacked in $C (bin/
# with the CUDA tests, tests/mk_mtp_oracle, tests/cuda/cuda_pairs_time, guild and the workers, tools/guild-mkmodel;
# lib/; COMMIT; base/cuda_pairs_time, the session start's timer with its kernel; BASE_COMMIT):
#   C=/tmp/c bash bench/device/mma38.sh [SECONDS]
# 1. check_cuda_pairs_mma's bit cases alone (every shape against the dp4a kernel);
# 2. cuda_pairs_time 1 2 4 8 16: this build's (every variant, its "default" the build's), the session start's
#    (base/: its "default" is main's kernel and shape), this build's again (run to run noise);
# 3. every other CUDA test program, 4 at a time (the bit cases of check_cuda_expert_mma and check_cuda_kv_long),
#    tests/cuda/mkmodel_greedy.sh and spec_cuda.sh, as far as the budget goes.
# Without a GPU it says so and exits 0. Output under $OUT: mma38.log, mma38-files.tar.gz.
set -u
budget=${1:-300}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib CK_DEFAULT_TIMEOUT=300
B=$C/bin
BASE=$C/base
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-mma38-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/mma38.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1) || {
    say "no GPU here ($gpu): nothing run"
    exit 0
}
say "mma38: commit $commit base $base_commit; $gpu; $(nproc) CPUs; $(free -g | awk '/Mem:/{print $2}') GiB RAM"
mkdir -p "$O/t"
step 120 "check_cuda_pairs_mma kernel" sh -c '"$0" "$@" > "'"$O"'/t/check_cuda_pairs_mma_kernel.log" 2>&1; st=$?;
    grep -E "^[0-9]+%: Checks|differs|pairs mma" "'"$O"'/t/check_cuda_pairs_mma_kernel.log" | tail -n 60; exit $st' \
    env CK_RUN_CASE=kernel "$B/tests/cuda/check_cuda_pairs_mma"
timer() { # NAME BIN
    step 60 "cuda_pairs_time 1 2 4 8 16 ($1)" sh -c '"$0" 1 2 4 8 16 > "'"$O"'/pairs_time-'"$1"'.txt" 2>&1; st=$?;
        cat "'"$O"'/pairs_time-'"$1"'.txt"; exit $st' "$2"
}
timer new "$B/tests/cuda/cuda_pairs_time"
timer base "$BASE/cuda_pairs_time"
timer new2 "$B/tests/cuda/cuda_pairs_time"
# the other tests, 4 at a time, each one's output in $O/t/NAME.log
pids=
running() {
    n=0
    for p in $pids; do kill -0 "$p" 2> /dev/null && n=$((n + 1)); done
    echo $n
}
tstep() { # LIMIT NAME CMD...
    while [ "$(running)" -ge 4 ]; do sleep 0.5; done
    (step "$@" > "$O/t/$(echo "$2" | tr -c 'A-Za-z0-9_.\n-' _).log" 2>&1) &
    pids="$pids $!"
}
for t in "$B"/tests/cuda/check_cuda_*; do
    [ -x "$t" ] || continue
    case $(basename "$t") in
    check_cuda_pairs_mma) ;;
    check_cuda_kv_long)
        for c in split_bits mma; do tstep 60 "check_cuda_kv_long $c" env CK_RUN_CASE=$c "$t"; done ;;
    check_cuda_expert_mma)
        for c in bits "dense bits" "few bits"; do tstep 60 "check_cuda_expert_mma $c" env CK_RUN_CASE="$c" "$t"; done ;;
    *) tstep 60 "$(basename "$t")" "$t" ;;
    esac
done
tstep 60 "mkmodel_greedy.sh" env GUILD_BUILDDIR="$B" sh tests/cuda/mkmodel_greedy.sh
tstep 60 "spec_cuda.sh" env GUILD_BUILDDIR="$B" sh tests/cuda/spec_cuda.sh
# shellcheck disable=SC2086 # the step subshells alone
wait $pids
for f in "$O"/t/*.log; do
    grep -hE '^== |^[0-9]+%: Checks|^rc=|FAIL|differs' "$f" | tail -n 4
done
tar -czf "$R/mma38-files.tar.gz" -C "$O" .
say "mma38 done"
