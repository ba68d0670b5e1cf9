#!/bin/bash
# The multi-process pipeline's overhead against the single-process reference: the same model, prompt and
# thread count, greedy decoding; per decode step, and per MoE layer exchange (the GPU worker's wait from
# publishing a layer's inputs to every CPU worker's done, against the CPU workers' own compute time for it).
# Runs alternate between the modes after one warm-up run of each; medians over the runs.
#
# usage: bench/pipeline_overhead.sh -m MODEL.gguf [-t THREADS] [-r RUNS] [-n TOKENS] [-k CPU_WORKERS]
#                                   [-s SPIN_US] [-o RESULT_FILE]
# Run from a build directory (./guild, ./guild-gpu-worker, ./guild-cpu-worker).
set -u
MODEL=""
THREADS=2
RUNS=5
TOKENS=64
WORKERS=1
SPIN=""
OUT=""
while getopts "m:t:r:n:k:s:o:" o; do
    case $o in
    m) MODEL=$OPTARG ;;
    t) THREADS=$OPTARG ;;
    r) RUNS=$OPTARG ;;
    n) TOKENS=$OPTARG ;;
    k) WORKERS=$OPTARG ;;
    s) SPIN=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
    esac
done
[ -n "$MODEL" ] || { sed -n '2,9p' "$0"; exit 2; }
G=./guild
[ -x "$G" ] || { echo "run from a build directory (no ./guild)"; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PROMPT="Hello"
COMMON=(-m "$MODEL" -p "$PROMPT" -n "$TOKENS" --temp 0 --threads "$THREADS" --ctx 1024)
MULTI=(--cpu-workers "$WORKERS" -v)
[ -n "$SPIN" ] && MULTI+=(--spin-us "$SPIN")

median() { sort -g | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else printf "%.4f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

step_ms() { # decode ms per step from a stderr file
    sed -n 's/.*decode: *\([0-9]*\) tokens in \([0-9.]*\) s.*/\1 \2/p' "$1" | awk '{printf "%.4f\n", $2 * 1000 / $1}'
}

run_single() { "$G" run "${COMMON[@]}" --single-process >/dev/null 2>"$1" || { cat "$1"; exit 1; }; }
run_multi() { "$G" run "${COMMON[@]}" "${MULTI[@]}" >/dev/null 2>"$1" || { cat "$1"; exit 1; }; }

run_single "$T/warm-s.err"
run_multi "$T/warm-m.err"
n_layer=$(sed -n 's/.*n_layer = \([0-9]*\).*/\1/p' "$T/warm-s.err" | head -1)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq 1 "$RUNS"); do
    run_single "$T/s$i.err"
    run_multi "$T/m$i.err"
    step_ms "$T/s$i.err" >>"$T/single"
    step_ms "$T/m$i.err" >>"$T/multi"
    # GPU worker side: wait per exchange (us), forward ms, waiting ms per decode step
    sed -n 's/.*decode step \([0-9.]*\) ms (GPU worker forward \([0-9.]*\) ms, of which waiting for experts \([0-9.]*\) ms over \([0-9.]*\) exchanges, \([0-9.]*\) us each).*/\1 \2 \3 \4 \5/p' \
        "$T/m$i.err" >>"$T/gpu"
    # CPU workers' compute per exchange (us), mean over the workers
    sed -n 's/.*cpu-worker\[[0-9]*\].*busy [0-9.]* ms (\([0-9.]*\) us each).*/\1/p' "$T/m$i.err" |
        awk '{s += $1} END {printf "%.2f\n", s / NR}' >>"$T/busy"
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

S=$(median <"$T/single")
M=$(median <"$T/multi")
WAIT=$(cut -d' ' -f5 "$T/gpu" | median)
FWD=$(cut -d' ' -f2 "$T/gpu" | median)
MOE=$(cut -d' ' -f3 "$T/gpu" | median)
BUSY=$(median <"$T/busy")
report() {
    echo "# benchmark: multi-process pipeline overhead vs single process (bench/pipeline_overhead.sh)"
    echo "# commit: $(git -C "$(dirname "$0")" describe --always --dirty 2>/dev/null)"
    echo "# machine: $(sed -n 's/^model name\t*: //p' /proc/cpuinfo | head -1); $(nproc) online CPUs; $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "# kernel: $(uname -sr)"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# model: $MODEL ($(du -h "$MODEL" | cut -f1)): $(sed -n 's/^model: //p' "$T/warm-s.err")"
    grep -E '^  (n_layer|n_head|n_expert) ' "$T/warm-s.err" | sed 's/^ */#   /'
    echo "# single: $G run ${COMMON[*]} --single-process"
    echo "# multi:  $G run ${COMMON[*]} ${MULTI[*]}"
    echo "# runs: $RUNS of each mode, alternating, after one warm-up run of each; medians below"
    echo "# load average: $LOAD0 at start, $LOAD1 at end"
    echo "# arena: $(grep -o 'arena [^ ]* ([^)]*)' "$T/m1.err" | head -1)"
    echo "decode_step_ms single=$S multi=$M"
    awk -v s="$S" -v m="$M" -v l="$n_layer" 'BEGIN {printf "overhead_per_step_ms=%.3f overhead_per_layer_us=%.1f (%d layers) ratio=%.3f\n", m - s, (m - s) * 1000 / l, l, m / s}'
    echo "gpu_worker_forward_ms=$FWD of_which_waiting_for_experts_ms=$MOE"
    awk -v w="$WAIT" -v b="$BUSY" 'BEGIN {printf "exchange_us: publish_to_all_done=%s cpu_worker_compute=%s handoff_and_copies=%.1f\n", w, b, w - b}'
    echo "# per run (ms per decode step): single: $(tr '\n' ' ' <"$T/single")"
    echo "#                               multi:  $(tr '\n' ' ' <"$T/multi")"
    echo "# per run (GPU worker: step_ms forward_ms moe_ms exchanges_per_step us_per_exchange):"
    sed 's/^/#   /' "$T/gpu"
    echo "# per run (CPU workers' compute per exchange, us; includes the prompt's exchanges): $(tr '\n' ' ' <"$T/busy")"
}
if [ -n "$OUT" ]; then
    report | tee "$OUT"
else
    report
fi
