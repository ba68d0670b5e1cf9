#!/bin/bash
# Decode speed of a CPU worker on "another host" against the latency of the link (issue 19): the coordinator and
# one CPU worker (which holds every routed expert) in two network namespaces joined by a veth pair
# (tests/netns_lib.sh), over CURVE, the worker's shard received from the coordinator; for each added one-way
# delay (tc netem, or the relay tests/netdelay.py where the kernel has no sch_netem), greedy decoding of the same
# prompt, the median of the runs' decode tok/s. For reference the same model with the worker on the
# coordinator's host, through the shared memory and through messages over ipc. A decode step waits for one
# exchange per MoE layer, each a round trip: the model says step = base + n_layer * 2 * delay, printed beside.
# Root only. Writes a markdown table with its provenance.
#
# usage: bench/netns_latency.sh [-m MODEL.gguf] [-d "0 0.0 0.5 1 2 5 10"] [-r RUNS] [-n TOKENS] [-t THREADS] [-o FILE]
# Run from a build directory (./guild, ./guild-cpu-worker, ./tools/guild-mkmodel). Without -m it writes a model
# of 8 layers of width 512, 32 experts top-4 (Q4_K).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
MODEL=""
DELAYS="0 0.0 0.5 1 2 5 10" # 0: the bare veth; 0.0: netem or the relay with no delay (the relay's own cost)
RUNS=3
TOKENS=48
THREADS=1
OUT=""
while getopts "m:d:r:n:t:o:" o; do
    case $o in
    m) MODEL=$OPTARG ;;
    d) DELAYS=$OPTARG ;;
    r) RUNS=$OPTARG ;;
    n) TOKENS=$OPTARG ;;
    t) THREADS=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
    esac
done
G=./guild
W=./guild-cpu-worker
[ -x "$G" ] && [ -x "$W" ] || { echo "run from a build directory (no ./guild or ./guild-cpu-worker)"; exit 2; }
NETNS_PY=$top/tests/netdelay.py
. "$top/tests/netns_lib.sh"
netns_setup || { echo "netns_latency: $NETNS_WHY"; exit 1; }
T=$(mktemp -d)
trap 'netns_cleanup; rm -rf "$T"' EXIT INT TERM
if [ -z "$MODEL" ]; then
    MODEL=$T/m.gguf
    SHAPE="--arch qwen3moe --layers 8 --embd 512 --heads 8 --kv-heads 4 --head-dim 64 --experts 32 --experts-used 4 --expert-ff 256 --ctx 1024 --type Q4_K --seed 5"
    ./tools/guild-mkmodel $SHAPE -q -o "$MODEL" >/dev/null || { echo "guild-mkmodel failed"; exit 1; }
else
    SHAPE="(given: $MODEL)"
fi
for n in coordinator b1; do "$G" keygen -o "$T/keys" --name $n >/dev/null || exit 1; done
COMMON=(-m "$MODEL" -p "Once upon a time there was a worker on another host" -n "$TOKENS" --temp 0 --ignore-eos
    --threads "$THREADS" --ctx 512 --cpu-workers 1 --spin-us 0)
PORT=5555

median() { sort -g | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
rate() { sed -n 's/.*decode: .*(\([0-9.]*\) tok\/s).*/\1/p' "$1"; }
rtt() { sed -n 's/.*cpu-worker\[0\].*heartbeat rtt \([0-9.]*\) ms.*/\1/p' "$1"; }

# one run with the worker in the other namespace, connecting to $NETNS_TARGET; the decode rate on stdout
remote_run() {
    ip netns exec "$NS_C" "$G" run "${COMMON[@]}" --listen "tcp://$ADDR_C:$PORT" --key "$T/keys/coordinator.key" \
        --allow "$T/keys/b1.pub" -v >/dev/null 2>"$T/c.err" &
    local gpid=$!
    local i=0
    while ! grep -q "pipeline: arena" "$T/c.err" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
    ip netns exec "$NS_W" "$W" --connect "tcp://$NETNS_TARGET:$PORT" --no-shared-memory --key "$T/keys/b1.key" \
        --server-key "$T/keys/coordinator.pub" 2>"$T/w.err" &
    local wpid=$!
    wait "$gpid" || { cat "$T/c.err" "$T/w.err" >&2; exit 1; }
    wait "$wpid"
    echo "$(rate "$T/c.err") $(rtt "$T/c.err")"
}

local_run() { # extra flags: through the arena, or --no-shared-memory
    "$G" run "${COMMON[@]}" --listen "ipc://$T/l.sock" >/dev/null 2>"$T/l.err" &
    local gpid=$!
    "$W" --connect "ipc://$T/l.sock" "$@" 2>"$T/lw.err" &
    local wpid=$!
    wait "$gpid" || { cat "$T/l.err" >&2; exit 1; }
    wait "$wpid"
    rate "$T/l.err"
}

rows=""
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for mode in arena messages; do
    : >"$T/r"
    for i in $(seq 1 "$RUNS"); do
        if [ $mode = arena ]; then local_run >>"$T/r"; else local_run --no-shared-memory >>"$T/r"; fi
    done
    tps=$(median <"$T/r")
    rows="$rows| same host, $mode (ipc) | | $(awk -v t="$tps" 'BEGIN { printf "%.2f", 1000 / t }') | $tps | | |\n"
done
n_layer=$(sed -n 's/.*n_layer = \([0-9]*\).*/\1/p' "$T/l.err" | head -1)
base_ms=""
base_rtt=""
for d in $DELAYS; do
    netns_delay "$d" "$PORT" || { echo "cannot add a delay of $d ms"; exit 1; }
    method=$NETNS_METHOD
    : >"$T/r"
    for i in $(seq 1 "$RUNS"); do remote_run >>"$T/r"; done
    tps=$(cut -d' ' -f1 "$T/r" | median)
    rtt_ms=$(cut -d' ' -f2 "$T/r" | median)
    step=$(awk -v t="$tps" 'BEGIN { printf "%.2f", 1000 / t }')
    [ -z "$base_ms" ] && base_ms=$step && base_rtt=$rtt_ms
    model=$(awk -v b="$base_ms" -v l="${n_layer:-0}" -v d="$d" 'BEGIN { printf "%.2f", b + l * 2 * d }')
    measured=$(awk -v b="$base_ms" -v l="${n_layer:-0}" -v r="$rtt_ms" -v r0="$base_rtt" \
        'BEGIN { printf "%.2f", b + l * (r - r0) }')
    rows="$rows| two namespaces, +$d ms each way ($method) | $rtt_ms | $step | $tps | $model | $measured |\n"
    echo "delay $d ms ($method): rtt $rtt_ms ms, $tps tok/s, $step ms a step (model $model / $measured ms)" >&2
done
netns_delay 0 "$PORT"

report() {
    echo "# Decode speed against the latency of a remote CPU worker's link"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%MZ); commit: $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$top" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "- machine: $(uname -srm), $(nproc) CPUs ($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)); load average before $LOAD0, after $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- model: $SHAPE; n_layer $n_layer"
    echo "- command: bench/netns_latency.sh -d \"$DELAYS\" -r $RUNS -n $TOKENS -t $THREADS (greedy, $TOKENS tokens, --ignore-eos, 1 CPU worker holding every expert, CURVE, its shard received from the coordinator)"
    echo "- the delay: added to each direction of the veth pair (tc netem), or, where the kernel has no sch_netem, by tests/netdelay.py in the worker's namespace in front of both of the coordinator's ports (its own cost shows in the 0 ms row only when the relay runs: the rows say which)"
    echo "- median of $RUNS runs; rtt: the coordinator's last heartbeat round trip to the worker (control socket,"
    echo "  measured); \"model\" step: the 0 ms step plus n_layer round trips of 2 x the nominal delay, and plus n_layer"
    echo "  x the measured rtt's increase (which includes the relay's own cost, when it runs: compare the 0 and 0.0 rows)"
    echo
    echo "| worker | rtt ms | step ms | decode tok/s | model step ms (nominal) | model step ms (measured rtt) |"
    echo "|---|---|---|---|---|---|"
    printf "%b" "$rows"
}
if [ -n "$OUT" ]; then report >"$OUT"; echo "wrote $OUT"; else report; fi
