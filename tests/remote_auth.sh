#!/bin/sh
# CURVE on the tcp endpoints, end to end (issue 19): a coordinator listening on tcp with a key pair and an allow
# list refuses a plain worker, a worker whose key is not allowed and one that pins another coordinator key, each
# of which exits 1 with the reason and the fix; then an allowed worker (exchanges as messages, on the CURVE data
# socket) gives the tokens and logits of --single-process bit for bit. Also: tcp without keys is refused on both
# sides unless --insecure, and key files that others may read or change are refused with the chmod that fixes
# them.
set -u
. "$(dirname "$0")/test_lib.sh"
W=$B/guild-cpu-worker
need_built "$MK" "$G" "$B/guild-gpu-worker" "$W"
T=$(mktemp -d) || exit 1
GPID=""
cleanup() {
    [ -n "$GPID" ] && kill -9 "$GPID" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT INT TERM

"$MK" --arch qwen3moe --layers 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --experts-used 2 \
    --expert-ff 128 --ctx 256 --type Q4_K --seed 11 -q -o "$T/m.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; fail "guild-mkmodel"; }
ARGS="--backend cpu -m $T/m.gguf -p Hello-there,-remote-worker -n 10 --temp 0.8 --seed 3 --threads 1 --batch 5"
"$G" run $ARGS --single-process --ids-out "$T/ref.ids" --logits-out "$T/ref.logits" >"$T/ref.txt" 2>"$T/ref.err" ||
    { cat "$T/ref.err"; fail "guild run --single-process"; }

# keys: the coordinator's pair, an allowed worker's, a stranger's
for n in coordinator w1 stranger; do
    "$G" keygen -o "$T/keys" --name $n >"$T/keygen.out" 2>&1 || { cat "$T/keygen.out"; fail "guild keygen $n"; }
done
[ "$(stat -c %a "$T/keys/w1.key")" = 600 ] || fail "keygen: w1.key is not 0600"
"$G" keygen -o "$T/keys" --name w1 >"$T/keygen.out" 2>&1 && fail "keygen overwrote w1.key"
grep -q "w1.key exists; not overwritten (--force" "$T/keygen.out" || { cat "$T/keygen.out"; fail "keygen message"; }
cp "$T/keys/w1.pub" "$T/allow"

# tcp without a decision is refused on both sides, before anything starts
"$G" run $ARGS --listen tcp://127.0.0.1:1 >"$T/nokey.txt" 2>&1 && fail "coordinator listened on tcp without keys"
grep -q "a tcp endpoint needs CURVE keys: --key FILE" "$T/nokey.txt" || { cat "$T/nokey.txt"; fail "no-key message"; }
"$W" --connect tcp://127.0.0.1:1 >"$T/nokey.txt" 2>&1
[ $? -eq 2 ] || fail "worker connected to tcp without keys"
grep -q "needs CURVE keys" "$T/nokey.txt" || { cat "$T/nokey.txt"; fail "worker no-key message"; }
# a key pair others may read, an allow list others may change
chmod 644 "$T/keys/coordinator.key"
"$G" run $ARGS --listen tcp://127.0.0.1:1 --key "$T/keys/coordinator.key" --allow "$T/allow" >"$T/perm.txt" 2>&1 &&
    fail "a 0644 key pair was used"
grep -q "coordinator.key: key pair with mode 0644.*chmod 600" "$T/perm.txt" || { cat "$T/perm.txt"; fail "key mode message"; }
chmod 600 "$T/keys/coordinator.key"
chmod 666 "$T/allow"
"$G" run $ARGS --listen tcp://127.0.0.1:1 --key "$T/keys/coordinator.key" --allow "$T/allow" >"$T/perm.txt" 2>&1 &&
    fail "a world-writable allow list was used"
grep -q "allow: allow list with mode 0666.*chmod 600" "$T/perm.txt" || { cat "$T/perm.txt"; fail "allow mode message"; }
chmod 600 "$T/allow"

worker() { # name, extra args...: runs a worker against $EP, 20 s at most; its status in $rc
    name=$1
    shift
    timeout 20 "$W" --connect "$EP" --no-shared-memory "$@" >"$T/$name.out" 2>&1
    rc=$?
}

ok=""
for try in 1 2 3; do
    PORT=$((20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 20000))
    EP="tcp://127.0.0.1:$PORT"
    "$G" run $ARGS --cpu-workers 1 --spin-us 0 -v --listen "$EP" --key "$T/keys/coordinator.key" \
        --allow "$T/allow" --ids-out "$T/tcp.ids" --logits-out "$T/tcp.logits" >"$T/tcp.txt" 2>"$T/tcp.err" &
    GPID=$!
    i=0
    while ! grep -q "pipeline: arena" "$T/tcp.err" 2>/dev/null && kill -0 "$GPID" 2>/dev/null && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    if kill -0 "$GPID" 2>/dev/null; then
        ok=1
        break
    fi
    wait "$GPID"
    GPID=""
    grep -q "Address already in use" "$T/tcp.err" || { cat "$T/tcp.err"; fail "guild run --listen $EP"; }
done
[ -n "$ok" ] || fail "no free tcp port"

# an unauthenticated (plain) worker
worker plain --insecure
[ $rc -eq 1 ] || { cat "$T/plain.out"; fail "plain worker: exit status $rc, expected 1"; }
grep -q "does it require CURVE keys\|requires CURVE" "$T/plain.out" || { cat "$T/plain.out"; fail "plain worker message"; }
# a worker whose key is not in the allow list
worker stranger --key "$T/keys/stranger.key" --server-key "$T/keys/coordinator.pub"
[ $rc -eq 1 ] || { cat "$T/stranger.out"; fail "stranger: exit status $rc, expected 1"; }
grep -q "refused this worker's key (status 400).*stranger.key must be in the coordinator's --allow" "$T/stranger.out" ||
    { cat "$T/stranger.out"; fail "stranger message"; }
# an allowed worker that pins another coordinator key (what it would see of an impostor)
worker pinned --key "$T/keys/w1.key" --server-key "$T/keys/stranger.pub"
[ $rc -eq 1 ] || { cat "$T/pinned.out"; fail "wrong server key: exit status $rc, expected 1"; }
grep -q "no CURVE handshake.*is --server-key the public key" "$T/pinned.out" || { cat "$T/pinned.out"; fail "pinned message"; }
kill -0 "$GPID" 2>/dev/null || { cat "$T/tcp.err"; fail "the coordinator died of the refused workers"; }
grep -q "refused a CURVE client from 127.0.0.1: its public key .* is not in the allow list" "$T/tcp.err" ||
    { cat "$T/tcp.err"; fail "the coordinator did not log the refusal"; }
grep -q "cpu-worker.*registered" "$T/tcp.err" && fail "a refused worker registered"

# the allowed worker: the run completes, bit for bit the single process's
worker good --key "$T/keys/w1.key" --server-key "$T/keys/coordinator.pub"
[ $rc -eq 0 ] || { cat "$T/good.out"; fail "allowed worker: exit status $rc"; }
wait "$GPID" || { cat "$T/tcp.err"; fail "guild run --listen $EP with keys"; }
GPID=""
grep -q "cpu-worker\[0\]: registered, pid [0-9]* on .*exchanges as messages, CURVE key w1" "$T/tcp.err" ||
    { cat "$T/tcp.err"; fail "the worker was not registered with its key's name"; }
for f in ids logits txt; do
    cmp -s "$T/ref.$f" "$T/tcp.$f" || fail "CURVE worker: $f differ from --single-process"
done
# it had no copy of the model: its shard came over the CURVE data socket, and was verified
grep -q "its shard (6 tensors, model received) is the coordinator's" "$T/tcp.err" ||
    { cat "$T/tcp.err"; fail "the received shard was not verified"; }

echo "PASS: tcp endpoints need keys or --insecure; plain, unknown-key and wrong-server-key workers refused (exit 1, reason given); key file modes checked; the allowed worker gives --single-process's tokens and logits over CURVE"
