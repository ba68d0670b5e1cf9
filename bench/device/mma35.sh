#!/usr/bin/env bash
# Session 35's call for the GPU-resident routed experts' tensor-core kernel (expert_pair_mma.cu's staged form), from
# the repo root with the pack unpacked in $C (bin/ with tests/cuda/cuda_pairs_time and bench/guild-cuda-prof, lib/,
# COMMIT, base/ with the session start's guild, workers and guild-cuda-prof, BASE_COMMIT):
#   C=/tmp/c bash bench/device/mma35.sh [SECONDS]
# 1. tests/cuda/cuda_pairs_time 1 2 4 8 16 alone on the GPU (each launch and block shape against the device copy
#    rate; its variant "direct 8w" is the session start's kernel and shape), while guild-mkmodel writes the
#    Qwen3-30B-A3B shape on the CPUs;
# 2. every CUDA test program, 4 at a time (check_cuda_pairs_mma's bit cases, not its timing case; the bit cases of
#    check_cuda_expert_mma and check_cuda_kv_long), tests/cuda/mkmodel_greedy.sh and spec_cuda.sh;
# 3. guild-cuda-prof --sessions 16 --gpu-mem 8G, new then base (the kernels of a 16-session step);
# 4. guild bench sessions 1,16 at 8G, new then base, as far as the budget goes.
# Without a GPU it says so and exits 0. Output under $OUT: mma35.log, mma35-files.tar.gz.
set -u
budget=${1:-235}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib CK_DEFAULT_TIMEOUT=300
B=$C/bin
BASE=$C/base
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-mma35-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/mma35.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step, prof
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1) || {
    say "no GPU here ($gpu): nothing run"
    exit 0
}
say "mma35: commit $commit base $base_commit; $gpu; $(nproc) CPUs; $(free -g | awk '/Mem:/{print $2}') GiB RAM"
m=/tmp/q30b.gguf
(timeout -s KILL 90 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 12 -q -o $m \
    > "$O/mk.txt" 2>&1
    echo "mkmodel rc=$?" >> "$O/mk.txt") &
mk=$!
step 60 "cuda_pairs_time 1 2 4 8 16" sh -c '"$0" 1 2 4 8 16 > "'"$O"'/pairs_time.txt" 2>&1; st=$?;
    cat "'"$O"'/pairs_time.txt"; exit $st' "$B/tests/cuda/cuda_pairs_time"
# the tests, 4 at a time, each one's output in $O/t/NAME.log
mkdir -p "$O/t"
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
    check_cuda_kv_long)
        for c in split_bits mma; do tstep 60 "check_cuda_kv_long $c" env CK_RUN_CASE=$c "$t"; done ;;
    check_cuda_expert_mma)
        for c in bits "dense bits" "few bits"; do tstep 60 "check_cuda_expert_mma $c" env CK_RUN_CASE="$c" "$t"; done ;;
    check_cuda_pairs_mma) tstep 75 "check_cuda_pairs_mma kernel" env CK_RUN_CASE=kernel "$t" ;;
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
say "tests done; waiting for the model"
wait $mk
cat "$O/mk.txt"
if grep -q "mkmodel rc=0" "$O/mk.txt"; then
    B0=$B
    prof new16 --sessions 16 --gpu-mem 8G --populate 128
    B=$BASE
    mkdir -p "$BASE/bench" && ln -sf "$BASE/guild-cuda-prof" "$BASE/bench/guild-cuda-prof"
    prof base16 --sessions 16 --gpu-mem 8G --populate 128
    B=$B0
    for side in new base; do
        bin=$B
        [ $side = base ] && bin=$BASE
        step 45 "guild bench sessions 1,16 at 8G ($side)" \
            sh -c '"$0" "$@" > "'"$O"'/sessions-'"$side"'.txt" 2>&1; st=$?;
            sed -n "/^# paired: each/,\$p" "'"$O"'/sessions-'"$side"'.txt"; exit $st' \
            "$bin/guild" bench sessions -m $m --gpu-mem 8G --threads 14 --sessions 1,16 --prompt 128 \
            --gen 16 --repeat 3 --probes 1 --json "$O/sessions-$side.json"
    done
fi
rm -f $m
tar -czf "$R/mma35-files.tar.gz" -C "$O" .
say "mma35 done"
