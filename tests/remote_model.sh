#!/bin/sh
# Remote workers without shared paths (issue 19): a CPU worker without the shared memory either reads its shard
# from its own copy of the model (--model PATH) or receives it from the coordinator over the data socket; either
# way the coordinator compares the digests of the shard's tensors with its own before the worker serves. The
# worker's copy and the received shard give --single-process's tokens and logits bit for bit; a tampered copy (one
# byte of an expert), another model, and a truncated copy are refused, and `guild run` fails with a message naming
# the worker, its file and the tensor.
set -u
. "$(dirname "$0")/test_lib.sh"
W=$B/guild-cpu-worker
need_built "$MK" "$G" "$B/guild-gpu-worker" "$W"
T=$(mktemp -d) || exit 1
HAND=""
cleanup() {
    for p in $HAND; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT INT TERM

MKARGS="--arch qwen3moe --layers 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --experts-used 2
    --expert-ff 128 --ctx 256 --type Q4_K -q"
"$MK" $MKARGS --seed 11 -o "$T/m.gguf" >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel"; }
"$MK" $MKARGS --seed 12 -o "$T/other.gguf" >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel"; }
ARGS="--backend cpu -m $T/m.gguf -p Over-the-hills-and-far-away -n 10 --temp 0.8 --seed 3 --threads 1 --batch 5"
"$G" run $ARGS --single-process --ids-out "$T/ref.ids" --logits-out "$T/ref.logits" >"$T/ref.txt" 2>"$T/ref.err" ||
    { cat "$T/ref.err"; fail "guild run --single-process"; }

# run NAME K [worker flags...]: the coordinator with K (1 or 2) hand-started workers without the shared memory, the
# first with the flags; its status in $rc
run() {
    name=$1
    k=$2
    shift 2
    EP="ipc://$T/$name.sock"
    "$G" run $ARGS --cpu-workers "$k" --spin-us 0 -v --listen "$EP" --ids-out "$T/$name.ids" \
        --logits-out "$T/$name.logits" >"$T/$name.txt" 2>"$T/$name.err" &
    GPID=$!
    "$W" --connect "$EP" --no-shared-memory -v "$@" 2>"$T/$name.w0" &
    HAND="$!"
    if [ "$k" -eq 2 ]; then
        "$W" --connect "$EP" --no-shared-memory -v 2>"$T/$name.w1" &
        HAND="$HAND $!"
    fi
    wait "$GPID"
    rc=$?
    for p in $HAND; do
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        kill -0 "$p" 2>/dev/null && fail "$name: worker $p still running 5 s after the coordinator"
    done
    HAND=""
}
same() {
    for f in ids logits txt; do
        cmp -s "$T/ref.$f" "$T/$1.$f" || fail "$1: $f differ from --single-process"
    done
}

# received: no copy of the model on the worker's side
run received 2
[ $rc -eq 0 ] || { cat "$T/received.err"; fail "received: guild run exited $rc"; }
same received
grep -q "received its shard from the coordinator" "$T/received.w0" || { cat "$T/received.w0"; fail "nothing received"; }
[ "$(grep -c "its shard (6 tensors, model received) is the coordinator's" "$T/received.err")" -eq 2 ] ||
    { cat "$T/received.err"; fail "received: the shards were not verified"; }

# its own copy, at another path
cp "$T/m.gguf" "$T/copy.gguf"
run own 2 --model "$T/copy.gguf"
[ $rc -eq 0 ] || { cat "$T/own.err"; fail "own copy: guild run exited $rc"; }
same own
grep -q "its shard (6 tensors, model $T/copy.gguf) is the coordinator's" "$T/own.err" ||
    { cat "$T/own.err"; fail "own copy: not verified"; }

# a tampered copy: one byte of expert 0 of blk.1.ffn_up_exps (one worker: its shard has every expert)
off=$("$G" inspect "$T/m.gguf" | awk '$2 == "blk.1.ffn_up_exps.weight" { print $NF }')
[ -n "$off" ] || fail "no offset of blk.1.ffn_up_exps.weight in guild inspect"
cp "$T/m.gguf" "$T/tampered.gguf"
printf '\377' | dd of="$T/tampered.gguf" bs=1 seek=$((off + 100)) conv=notrunc 2>/dev/null
cmp -s "$T/m.gguf" "$T/tampered.gguf" && fail "the copy was not changed"
run tampered 1 --model "$T/tampered.gguf"
[ $rc -eq 1 ] || { cat "$T/tampered.err"; fail "tampered: guild run exited $rc, expected 1"; }
grep -q "cpu-worker\[0\] (pid [0-9]* on .*, model $T/tampered.gguf) does not hold the experts of the coordinator's $T/m.gguf: tensor blk.1.ffn_up_exps.weight (experts 0-7): its bytes differ" \
    "$T/tampered.err" || { cat "$T/tampered.err"; fail "tampered: no clear message"; }
grep -q "the coordinator reports: .*blk.1.ffn_up_exps.weight" "$T/tampered.w0" ||
    { cat "$T/tampered.w0"; fail "tampered: the worker was not told"; }

# another model of the same shape
run other 1 --model "$T/other.gguf"
[ $rc -eq 1 ] || { cat "$T/other.err"; fail "other model: guild run exited $rc, expected 1"; }
grep -q "does not hold the experts of the coordinator's $T/m.gguf: tensor blk.0.ffn_gate_exps.weight (experts 0-7): its bytes differ" \
    "$T/other.err" || { cat "$T/other.err"; fail "other model: no clear message"; }

# a truncated copy
cp "$T/m.gguf" "$T/truncated.gguf"
truncate -s $((off + 1000)) "$T/truncated.gguf"
run truncated 1 --model "$T/truncated.gguf"
[ $rc -eq 1 ] || { cat "$T/truncated.err"; fail "truncated: guild run exited $rc, expected 1"; }
grep -q "pipeline failed: cpu-worker\[0\]: $T/truncated.gguf: tensor 'blk.1.ffn_up_exps.weight': data .* goes past the end of the file" \
    "$T/truncated.err" || { cat "$T/truncated.err"; fail "truncated: no clear message"; }

# gpt-oss: the experts' biases are part of the shard (received, verified, computed with)
"$MK" --arch gpt-oss --layers 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --experts-used 2 \
    --expert-ff 128 --ctx 256 --type Q8_0 --sliding-window 8 -q --seed 11 -o "$T/m.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; fail "guild-mkmodel --arch gpt-oss"; }
"$G" run $ARGS --single-process --ids-out "$T/ref.ids" --logits-out "$T/ref.logits" >"$T/ref.txt" 2>"$T/ref.err" ||
    { cat "$T/ref.err"; fail "gpt-oss: guild run --single-process"; }
run oss 2
[ $rc -eq 0 ] || { cat "$T/oss.err"; fail "gpt-oss received: guild run exited $rc"; }
same oss
[ "$(grep -c "its shard (12 tensors, model received) is the coordinator's" "$T/oss.err")" -eq 2 ] ||
    { cat "$T/oss.err"; fail "gpt-oss received: the shards (weights and biases) were not verified"; }

echo "PASS: a worker's own copy and a shard received from the coordinator == --single-process (tokens, logits); tampered, other and truncated copies refused, naming the worker, its file and the tensor; a gpt-oss shard with its biases"
