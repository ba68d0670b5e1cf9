#!/bin/sh
# Two hosts on one machine (issue 19): the coordinator and a CPU worker in two network namespaces joined by a veth
# pair (tests/netns_lib.sh; the worker also under a hostname of its own), over CURVE, the worker without a copy of
# the model. Shows: the tokens and logits of --single-process bit for bit, also with 5 ms added each way (tc netem,
# else the relay tests/netdelay.py); the worker's link dropped in the middle of a generation is found within the
# liveness window, and with --fallback-local its shard goes to a worker on the coordinator's host, the run
# completing with the same tokens; without it, the run fails after --rejoin-ms with a message naming the worker
# and its host, never hanging. Root only (CI runs as root); skipped, saying why, elsewhere.
set -u
B=${GUILD_BUILDDIR:-.}
top="${GUILD_SRCDIR:-$(dirname "$0")/..}"
MK=$B/tools/guild-mkmodel
G=$B/guild
W=$B/guild-cpu-worker
for f in "$MK" "$G" "$B/guild-gpu-worker" "$W"; do
    if [ ! -x "$f" ]; then
        echo "SKIP: $f is not built"
        exit 77
    fi
done
NETNS_PY=$top/tests/netdelay.py
. "$top/tests/netns_lib.sh"
if ! netns_setup; then
    echo "SKIP: $NETNS_WHY"
    exit 77
fi
T=$(mktemp -d) || exit 1
PIDS=""
cleanup() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    netns_cleanup
    rm -rf "$T"
}
trap cleanup EXIT INT TERM

fail() {
    echo "FAIL: $*"
    exit 1
}

# ms_since T0: milliseconds since date +%s%N gave T0
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
# wait_for FILE PATTERN [TENTHS]: until PATTERN is in FILE (default 10 s)
wait_for() {
    i=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        [ "$i" -ge "${3:-100}" ] && return 1
        sleep 0.1
        i=$((i + 1))
    done
}

"$MK" --arch qwen3moe --layers 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --experts-used 2 \
    --expert-ff 128 --ctx 4096 --type Q4_K --seed 11 -q -o "$T/m.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; fail "guild-mkmodel"; }
for n in coordinator b1; do "$G" keygen -o "$T/keys" --name $n >/dev/null || fail "guild keygen"; done
ARGS="--backend cpu -m $T/m.gguf -p The-other-host --temp 0.8 --seed 7 --threads 1 --ctx 2048 --ignore-eos"
"$G" run $ARGS -n 24 --single-process --ids-out "$T/ref.ids" --logits-out "$T/ref.logits" >/dev/null 2>"$T/ref.err" ||
    { cat "$T/ref.err"; fail "guild run --single-process"; }
"$G" run $ARGS -n 700 --single-process --ids-out "$T/long.ids" >/dev/null 2>"$T/long.err" ||
    { cat "$T/long.err"; fail "guild run --single-process -n 700"; }

PORT=5555
EP="tcp://$ADDR_C:$PORT"
# coordinator NAME [flags...]: guild run in the coordinator's namespace, in the background ($GPID)
coordinator() {
    name=$1
    shift
    ip netns exec "$NS_C" "$G" run $ARGS --cpu-workers 1 --spin-us 0 -v --listen "$EP" --key "$T/keys/coordinator.key" \
        --allow "$T/keys/b1.pub" --ids-out "$T/$name.ids" "$@" >"$T/$name.txt" 2>"$T/$name.err" &
    GPID=$!
    PIDS="$PIDS $GPID"
    wait_for "$T/$name.err" "pipeline: arena" 50 || { cat "$T/$name.err"; fail "$name: the coordinator did not start"; }
}
# worker NAME: the CPU worker in the other namespace, as host guild-b, connecting to $NETNS_TARGET ($WPID)
worker() {
    ip netns exec "$NS_W" unshare --uts sh -c "hostname guild-b && exec \"$W\" --connect tcp://$NETNS_TARGET:$PORT --key \
        \"$T/keys/b1.key\" --server-key \"$T/keys/coordinator.pub\" -v" 2>"$T/$1.w" &
    WPID=$!
    PIDS="$PIDS $WPID"
}
decode_rate() { sed -n 's/.*decode: .*(\([0-9.]*\) tok\/s).*/\1/p' "$T/$1.err"; }

# the other host, over CURVE, its shard received: the same bits
coordinator two -n 24 --logits-out "$T/two.logits"
worker two
wait "$GPID" || { cat "$T/two.err" "$T/two.w"; fail "two hosts: guild run failed"; }
cmp -s "$T/ref.ids" "$T/two.ids" && cmp -s "$T/ref.logits" "$T/two.logits" ||
    fail "two hosts: tokens or logits differ from --single-process"
grep -q "cpu-worker\[0\]: registered, pid [0-9]* on guild-b, exchanges as messages, CURVE key b1" "$T/two.err" ||
    { cat "$T/two.err"; fail "two hosts: the worker did not come from guild-b with its key"; }
grep -q "its shard (6 tensors, model received) is the coordinator's" "$T/two.err" ||
    { cat "$T/two.err"; fail "two hosts: the received shard was not verified"; }
wait "$WPID"

# 5 ms more each way: slower, the same bits
netns_delay 5 "$PORT" || fail "cannot add a delay (netem: no; relay: $NETNS_PY did not start)"
coordinator slow -n 24 --logits-out "$T/slow.logits"
worker slow
wait "$GPID" || { cat "$T/slow.err" "$T/slow.w"; fail "5 ms: guild run failed"; }
cmp -s "$T/ref.ids" "$T/slow.ids" && cmp -s "$T/ref.logits" "$T/slow.logits" ||
    fail "5 ms: tokens or logits differ from --single-process"
wait "$WPID"
METHOD=$NETNS_METHOD
echo "decode: $(decode_rate two) tok/s over the veth, $(decode_rate slow) tok/s with 5 ms added each way ($METHOD)"

# 2 ms each way from here on: a generation lasts long enough (2 exchanges a token) for the link to drop during it
netns_delay 2 "$PORT" || fail "cannot add a delay"

# the worker's link drops during a generation: found within the liveness window (the heartbeats' 600 ms), its
# shard given to a worker on this host, the run completed with the same tokens
coordinator drop -n 700 --fallback-local
worker drop
wait_for "$T/drop.err" "cpu-worker\[0\]: ready" 100 || { cat "$T/drop.err"; fail "drop: the worker never got ready"; }
sleep 0.3
t0=$(date +%s%N)
netns_link down
wait_for "$T/drop.err" "has been silent for" 50 || { cat "$T/drop.err"; fail "drop: the lost link was not noticed"; }
detect=$(ms_since "$t0")
wait "$GPID" || { cat "$T/drop.err"; fail "drop: guild run failed"; }
grep -q "cpu-worker\[0\] (pid [0-9]* on guild-b) has been silent for 600 ms; its shard goes to a worker on this host" \
    "$T/drop.err" || { cat "$T/drop.err"; fail "drop: the shard did not go to a local worker"; }
cmp -s "$T/long.ids" "$T/drop.ids" || fail "drop: tokens differ from --single-process after the takeover"
grep -q "stopped: length limit" "$T/drop.err" || { cat "$T/drop.err"; fail "drop: the run did not finish"; }
[ "$detect" -lt 2600 ] || fail "drop: the lost link was noticed after $detect ms (liveness window 600 ms)"
kill -9 "$WPID" 2>/dev/null
wait "$WPID" 2>/dev/null
netns_link up

# without --fallback-local: the run fails, naming the worker, once it has not come back for --rejoin-ms
coordinator lost -n 700 --rejoin-ms 1000
worker lost
wait_for "$T/lost.err" "cpu-worker\[0\]: ready" 100 || { cat "$T/lost.err"; fail "lost: the worker never got ready"; }
sleep 0.3
t0=$(date +%s%N)
netns_link down
wait "$GPID"
rc=$?
took=$(ms_since "$t0")
[ $rc -eq 1 ] || { cat "$T/lost.err"; fail "lost: guild run exited $rc, expected 1"; }
grep -q "cpu-worker\[0\] (pid [0-9]* on guild-b) was lost (has been silent for 600 ms) and has not registered again within 1000 ms" \
    "$T/lost.err" || { cat "$T/lost.err"; fail "lost: no message naming the worker"; }
[ "$took" -lt 10000 ] || fail "lost: the run took $took ms to fail"
kill -9 "$WPID" 2>/dev/null
wait "$WPID" 2>/dev/null
netns_delay 0 "$PORT"

echo "PASS: two network namespaces over CURVE == --single-process (also with 5 ms each way, $METHOD); link drop noticed in $detect ms and the shard taken over locally (same tokens); without --fallback-local the run failed in $took ms naming the worker"
