#!/usr/bin/env bash
# The consolidated GPU test run of a session in one call within a device-time budget (SECONDS, default 250):
# every CUDA test program the pack holds (tests/cuda/check_cuda_*: the kernels' bit tests, the backend against the
# CPU backend, the batch and sequence invariance, the tensor-core paths), then the scripts that drive the whole
# stack on the GPU (tests/cuda/mkmodel_greedy.sh: greedy tokens of every architecture's tiny file, CUDA = CPU;
# tests/cuda/spec_cuda.sh: speculative decoding on the GPU, token-identical; tests/cuda/pdl_loads.sh: the kernels'
# accesses before their waits, off guild-gpu-worker's machine code). With a model shape and a baseline
# build in $C/base (guild and the workers), a decode A/B on that shape afterwards (DS_LAYERS > 0: a DeepSeek-V3
# cut of that many layers at --gpu-mem 24G, decode at 512 and 4096 positions, 2 runs each, base then new).
# Pack: bash bench/device/repack.sh BUILD_DIR (and copy another build's guild, guild-cpu-worker,
# guild-gpu-worker into .carry/base for the A/B); then on the device from the repo root:
#   C=DIR bash bench/device/alltests.sh [SECONDS] [DS_LAYERS] [JOBS]
# Every step runs under `timeout -s KILL` and is skipped when it would not fit. Output: $OUT/alltests.log. With
# JOBS > 1 the test steps run that many at a time (the GPU holds several test programs at once: their bits do not
# depend on what else runs), each one's output in tests.tgz and its last lines in the log.
set -u
budget=${1:-250}
ds_layers=${2:-0}
jobs=${3:-1}
C=${C:-$PWD/.carry}
export LD_LIBRARY_PATH=$C/lib CK_DEFAULT_TIMEOUT=300
B=$C/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/alltests.log") 2>&1
t0=$(date +%s)
. "$(dirname "$0")/lib.sh" # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit"
# test LIMIT NAME CMD...: a step, in the background when JOBS > 1 (its output in $O/t/NAME.log until the end)
test_step() {
    if [ "$jobs" -le 1 ]; then
        step "$@"
        return
    fi
    while [ "$(running)" -ge "$jobs" ]; do sleep 0.5; done
    mkdir -p "$O/t"
    (step "$@" > "$O/t/$(echo "$2" | tr -c 'A-Za-z0-9_.\n-' _).log" 2>&1) &
    pids="$pids $!"
}
running() { # how many of the test steps still run
    n=0
    for p in $pids; do kill -0 "$p" 2> /dev/null && n=$((n + 1)); done
    echo $n
}
pids=
# what each kernel touches before its wait, off the packed GPU worker's machine code against this tree's list
# (tests/cuda/pdl_loads.txt: a variant build whose list is on its own branch differs there; skips without cuobjdump);
# first, so that its 90 s fit, and beside the test steps, not in one of their JOBS slots (one core, no GPU)
mkdir -p "$O/t"
(step 90 "pdl_loads.sh" env GUILD_SRCDIR="$PWD" sh tests/cuda/pdl_loads.sh --binary "$B/guild-gpu-worker" \
    --cuobjdump "$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)" > "$O/t/pdl_loads.sh.log" 2>&1) &
pdl_pid=$!
for t in "$B"/tests/cuda/check_cuda_*; do
    [ -x "$t" ] || continue
    case $(basename "$t") in
    check_cuda_kv_long) # its bit cases; the timing cases are longctx.sh's measurements
        for c in split_bits mma; do
            test_step 60 "check_cuda_kv_long $c" env CK_RUN_CASE=$c "$t"
        done ;;
    check_cuda_expert_mma) # its bit cases; the timing cases (over 60 s since the few-token kernel's) are measurements
        for c in bits "dense bits" "few bits"; do
            test_step 60 "check_cuda_expert_mma $c" env CK_RUN_CASE="$c" "$t"
        done ;;
    check_cuda_free_mem) ;; # alone after the others: it measures the device's free memory
    *) test_step 60 "$(basename "$t")" "$t" ;; # the longest took ~36 s
    esac
done
test_step 60 "mkmodel_greedy.sh" env GUILD_BUILDDIR="$B" sh tests/cuda/mkmodel_greedy.sh
test_step 60 "spec_cuda.sh" env GUILD_BUILDDIR="$B" sh tests/cuda/spec_cuda.sh
wait "$pdl_pid"
[ "$jobs" -le 1 ] && cat "$O/t/pdl_loads.sh.log"
if [ "$jobs" -gt 1 ]; then
    # shellcheck disable=SC2086 # the step subshells alone: a bare wait would also wait for the log's tee
    wait $pids # every step runs under timeout -s KILL
    for f in "$O"/t/*.log; do # each step's verdict: Check's summary line, its exit status
        grep -hE '^== |^[0-9]+%: Checks|^rc=|PASS|FAIL' "$f" | tail -n 4
    done
    tar -czf "$O/tests.tgz" -C "$O" t && rm -rf "$O/t"
fi
[ -x "$B/tests/cuda/check_cuda_free_mem" ] && step 60 "check_cuda_free_mem (alone)" "$B/tests/cuda/check_cuda_free_mem"
say "tests done"
[ "$ds_layers" -gt 0 ] && [ -x "$C/base/guild" ] || exit 0
m=/tmp/deepseek-v3-cut.gguf
step 100 "model: DeepSeek-V3 shape, $ds_layers layers, --fill pool" "$B/tools/guild-mkmodel" --shape deepseek-v3 \
    --layers "$ds_layers" --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || exit 0
for who in base new; do
    bin=$B
    [ $who = base ] && bin=$C/base
    step 120 "decode $who" sh -c '"$0" "$@" 2>&1 | grep -E "^ +[0-9]+ |bytes/token|run [01]:"' \
        "$bin/guild" bench run -m $m --populate 512,4096 --gen 32 --runs 2 --threads 14 --batch 4096 --gpu-mem 24G \
        --json "$O/ds-$who.json"
done
rm -f $m
say done
