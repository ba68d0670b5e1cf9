#!/bin/sh
# The multi-process pipeline gives what the single-process reference gives: the same token ids and the same
# logits, byte for byte (--logits-out), for every architecture (the hybrids' recurrent state too), with 1, 2 and 3 CPU
# worker processes (the workers of a node splitting each exchange's experts), a prompt prefilled in several batches
# and sampled decoding. Also: CPU workers started by hand
# (--listen / guild-cpu-worker --connect), over tcp with one of them exchanging through messages instead of
# the arena, a named arena file (--arena-dir), `guild plan` / --print-plan, the CPUs given by node (--cpu-nodes: two
# nodes faked on this machine; more workers than CPUs said with the fix), and a clear refusal when the worker
# binaries are missing.
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK" "$G" "$B/guild-gpu-worker" "$B/guild-cpu-worker"
T=$(mktemp -d) || exit 1
HAND=""
cleanup() {
    for p in $HAND; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT INT TERM

PROMPT="The quick brown fox jumps over the lazy dog, and then it runs away into the forest."
run() { # name, model, extra args...
    name=$1
    model=$2
    shift 2
    "$G" run -m "$model" -p "$PROMPT" -n 12 --temp 0.8 --seed 5 --threads 1 --batch 7 \
        --ids-out "$T/$name.ids" --logits-out "$T/$name.logits" "$@" >"$T/$name.txt" 2>"$T/$name.err" ||
        { cat "$T/$name.err"; fail "guild run $name $*"; }
}
same() { # reference, name
    for f in ids logits txt; do
        cmp -s "$T/$1.$f" "$T/$2.$f" || fail "$2: $f differ from $1"
    done
}

n=0
for arch in qwen3moe qwen2moe mixtral olmoe gpt-oss glm4moe deepseek2 qwen3next qwen35moe; do
    # gpt-oss: a window shorter than the prompt, so that its sliding layers slide; glm4moe: a dense layer first
    # (no worker holds experts of it), expert groups, an MTP layer never run; deepseek2: the same, with latent
    # attention through a q LoRA, yarn; the hybrids: gated delta net, full attention, gated delta net, full
    # attention
    extra=""
    [ "$arch" = gpt-oss ] && extra="--sliding-window 8"
    [ "$arch" = glm4moe ] && extra="--layers 3 --nextn 1 --expert-groups 4 --groups-used 2"
    [ "$arch" = deepseek2 ] &&
        extra="--layers 3 --nextn 1 --expert-groups 4 --groups-used 2 --q-lora 64 --kv-lora 64 --yarn-factor 4"
    case $arch in qwen3next | qwen35moe) extra="--layers 4 --full-attn-interval 2" ;; esac
    # shellcheck disable=SC2086
    "$MK" --arch "$arch" --layers 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --experts-used 2 \
        --expert-ff 128 --ctx 256 --type Q4_K --seed 11 -q $extra -o "$T/$arch.gguf" >"$T/mk.log" 2>&1 ||
        { cat "$T/mk.log"; fail "guild-mkmodel --arch $arch"; }
    run "$arch-single" "$T/$arch.gguf" --single-process
    [ -s "$T/$arch-single.logits" ] || fail "$arch: no logits written"
    for k in 1 2 3; do
        run "$arch-$k" "$T/$arch.gguf" --cpu-workers $k --spin-us 0
        same "$arch-single" "$arch-$k"
        grep -q "pipeline: $k CPU workers; restarts:" "$T/$arch-$k.err" ||
            { cat "$T/$arch-$k.err"; fail "$arch, $k CPU workers: no pipeline summary"; }
        # no complaint from any process (a worker's exit status, a sanitizer report, ...); a worker found
        # silent on an overloaded machine is restarted (same bits), so it is only noted
        if grep -q "has been silent" "$T/$arch-$k.err"; then
            echo "note: $arch, $k CPU workers: a worker was found silent and restarted (machine overloaded?)"
        # (more workers than this machine's CPUs is said, with the fix: below)
        elif grep -v -e "warning: arena: no .*pages" -e "for $k workers, so workers share CPUs" "$T/$arch-$k.err" |
            grep -qiE "warning|error|sanitizer"; then
            cat "$T/$arch-$k.err"
            fail "$arch, $k CPU workers: warnings or errors on stderr"
        fi
        n=$((n + 1))
    done
done

# deepseek2 as V2-Lite is: no q LoRA, softmax gating
"$MK" --arch deepseek2 --layers 3 --embd 128 --heads 4 --head-dim 64 --experts 8 --experts-used 2 --expert-ff 128 \
    --ctx 256 --type Q8_0 --seed 12 -q --q-lora 0 --gating softmax -o "$T/ds-lite.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; fail "guild-mkmodel deepseek2 --gating softmax"; }
run ds-lite-single "$T/ds-lite.gguf" --single-process
run ds-lite-2 "$T/ds-lite.gguf" --cpu-workers 2 --spin-us 0
same ds-lite-single ds-lite-2
# --threads above each worker's share of the node (two workers split it): cut to its CPUs, said once, the same output
many=$(($(nproc) * 2))
run threads-cut "$T/ds-lite.gguf" --cpu-workers 2 --spin-us 0 --threads "$many"
same ds-lite-2 threads-cut
[ "$(grep -c -- "--threads $many: cpu-worker 0 has" "$T/threads-cut.err")" = 1 ] ||
    { cat "$T/threads-cut.err"; fail "--threads $many with 2 workers: not one warning"; }
"$G" plan -m "$T/ds-lite.gguf" --cpu-workers 2 >"$T/plan2.txt" 2>&1 || fail "guild plan --cpu-workers 2"
nt=$(sed -n 's/.*cpu-worker 1: node [0-9]*, cpus [0-9,-]*, \([0-9]*\) thread.*/\1/p' "$T/plan2.txt")
[ -n "$nt" ] && [ "$nt" -ge 1 ] && [ "$nt" -le $((($(nproc) + 1) / 2)) ] ||
    { cat "$T/plan2.txt"; fail "guild plan: the workers' threads ($nt) are not their share of the node"; }

# a split model (--split-max-size: llama.cpp's NAME-00001-of-0000N.gguf parts) runs as the one file it was cut
# from: the same tokens and logits, single and multi-process
"$MK" --arch glm4moe --layers 3 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --experts-used 2 \
    --expert-ff 128 --ctx 256 --type Q4_K --seed 11 -q --nextn 1 --expert-groups 4 --groups-used 2 \
    --split-max-size 300K -o "$T/split.gguf" >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "mkmodel --split-max-size"; }
first=$(ls "$T"/split-00001-of-*.gguf 2>/dev/null)
[ -n "$first" ] && [ "$(ls "$T"/split-*-of-*.gguf | wc -l)" -gt 2 ] || fail "--split-max-size: no parts written"
run split-single "$first" --single-process
same glm4moe-single split-single
run split-2 "$first" --cpu-workers 2 --spin-us 0
same glm4moe-single split-2
"$G" run -m "$T/split-00002-of-${first##*-of-}" -p hi -n 1 >"$T/part2.txt" 2>&1 && fail "a second part opened alone"
grep -q "open its first part, .*split-00001-of-" "$T/part2.txt" || { cat "$T/part2.txt"; fail "second part's message"; }

# mixed types (llama.cpp's Q4_K_M recipe: Q6_K, Q8_0 ... beside Q4_K), more experts, several threads
"$MK" --arch qwen3moe --layers 3 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 16 --experts-used 4 \
    --expert-ff 128 --ctx 256 --seed 3 -q -o "$T/mixed.gguf" >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "mkmodel"; }
run mixed-single "$T/mixed.gguf" --single-process
run mixed-3 "$T/mixed.gguf" --cpu-workers 3 --threads 2 --spin-us 0 -v
same mixed-single mixed-3
# the three workers of the node split each exchange's experts (expert_share.h), each reading the others' copies
[ "$(grep -c "splits each exchange between the 3 workers of its node (48 experts)" "$T/mixed-3.err")" = 3 ] ||
    { cat "$T/mixed-3.err"; fail "mixed-3: the workers do not split the node's exchanges"; }

# the CPUs by node (--cpu-nodes): two nodes of one CPU each, the topology of a machine of two nodes faked on this
# one; the plan gives each worker its node's CPU; four workers double up on them, said once with the count that
# fits; the same output
cpus=$(awk '/^Cpus_allowed_list/{print $2}' /proc/self/status | tr ',' '\n' |
    awk -F- '{e = $2 == "" ? $1 : $2; for (c = $1; c <= e; c++) print c}')
c0=$(echo "$cpus" | sed -n 1p)
c1=$(echo "$cpus" | sed -n 2p)
if [ -n "$c1" ]; then
    "$G" plan -m "$T/mixed.gguf" --cpu-workers 2 --cpu-nodes "$c0/$c1" >"$T/plan-nodes.txt" 2>&1 ||
        { cat "$T/plan-nodes.txt"; fail "guild plan --cpu-nodes $c0/$c1"; }
    grep -q "cpu-worker 0: node 0, cpus $c0, 1 thread," "$T/plan-nodes.txt" &&
        grep -q "cpu-worker 1: node 1, cpus $c1 (memory on NUMA node [0-9]*), 1 thread,\|cpu-worker 1: node 1, cpus $c1, 1 thread," \
            "$T/plan-nodes.txt" || { cat "$T/plan-nodes.txt"; fail "--cpu-nodes $c0/$c1: each worker its node's CPU"; }
    grep -qi "warning" "$T/plan-nodes.txt" && { cat "$T/plan-nodes.txt"; fail "--cpu-nodes, 2 workers: a warning"; }
    run nodes-4 "$T/mixed.gguf" --cpu-workers 4 --cpu-nodes "$c0/$c1" --spin-us 0 -v
    same mixed-single nodes-4
    # two workers a node: each pair splits its node's half of the experts, never the other node's
    [ "$(grep -c "splits each exchange between the 2 workers of its node (24 experts)" "$T/nodes-4.err")" = 4 ] ||
        { cat "$T/nodes-4.err"; fail "nodes-4: the workers do not split exchanges by node"; }
    [ "$(grep -c -- "--cpu-workers 4: node 0 has 1 CPU for 2 workers, .*give --cpu-workers 2 or fewer" \
        "$T/nodes-4.err")" = 1 ] || { cat "$T/nodes-4.err"; fail "4 workers on 2 CPUs: not one warning with the fix"; }
fi
"$G" plan -m "$T/mixed.gguf" --cpu-nodes "$c0/$c0" >"$T/plan-bad.txt" 2>&1 && fail "--cpu-nodes with a CPU twice"
grep -q "CPU $c0 is given twice" "$T/plan-bad.txt" || { cat "$T/plan-bad.txt"; fail "--cpu-nodes twice: message"; }
"$G" run -m "$T/mixed.gguf" -p hi -n 1 --single-process --cpu-nodes "$c0" >"$T/single-nodes.txt" 2>&1 &&
    fail "--cpu-nodes with --single-process"

# a named arena file instead of a memfd; gone afterwards
mkdir "$T/shm"
run named "$T/mixed.gguf" --cpu-workers 2 --arena-dir "$T/shm" --spin-us 0
same mixed-single named
[ -z "$(ls -A "$T/shm")" ] || fail "--arena-dir: left $(ls "$T/shm")"

# CPU workers started by hand, connecting to --listen
EP="ipc://$T/listen.sock"
"$G" run -m "$T/mixed.gguf" -p "$PROMPT" -n 12 --temp 0.8 --seed 5 --threads 1 --batch 7 --spin-us 0 \
    --cpu-workers 2 --listen "$EP" --ids-out "$T/hand.ids" --logits-out "$T/hand.logits" >"$T/hand.txt" \
    2>"$T/hand.err" &
GPID=$!
"$B/guild-cpu-worker" --node 0 --connect "$EP" 2>"$T/hand0.err" &
HAND="$!"
"$B/guild-cpu-worker" --node 0 --connect "$EP" 2>"$T/hand1.err" &
HAND="$HAND $!"
wait $GPID || { cat "$T/hand.err"; fail "guild run --listen"; }
same mixed-single hand
for p in $HAND; do # told to shut down: they exit on their own
    i=0
    while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    kill -0 "$p" 2>/dev/null && fail "hand-started worker $p still running 5 s after the coordinator finished"
done
HAND=""

# over tcp (CURVE: tests/remote_auth.sh tests the keys), one CPU worker through the arena and one without it
# (--no-shared-memory: its exchanges travel as messages through the coordinator's bridge, as for a worker on
# another host)
for who in coordinator w; do "$G" keygen -o "$T/keys" --name $who >/dev/null || fail "guild keygen"; done
ok=""
for try in 1 2 3; do
    PORT=$((20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 20000))
    EP="tcp://127.0.0.1:$PORT"
    "$G" run -m "$T/mixed.gguf" -p "$PROMPT" -n 12 --temp 0.8 --seed 5 --threads 1 --batch 7 --spin-us 0 \
        --cpu-workers 2 --listen "$EP" --key "$T/keys/coordinator.key" --allow "$T/keys/w.pub" -v \
        --ids-out "$T/tcp.ids" --logits-out "$T/tcp.logits" >"$T/tcp.txt" 2>"$T/tcp.err" &
    GPID=$!
    KEYS="--key $T/keys/w.key --server-key $T/keys/coordinator.pub"
    "$B/guild-cpu-worker" --connect "$EP" --no-shared-memory $KEYS 2>"$T/tcp0.err" &
    HAND="$!"
    "$B/guild-cpu-worker" --connect "$EP" $KEYS 2>"$T/tcp1.err" &
    HAND="$HAND $!"
    if wait $GPID; then
        ok=1
        break
    fi
    grep -q "Address already in use" "$T/tcp.err" || { cat "$T/tcp.err"; fail "guild run --listen $EP"; }
    for p in $HAND; do kill -9 "$p" 2>/dev/null; done
done
[ -n "$ok" ] || fail "no free tcp port"
same mixed-single tcp
grep -q "exchanges as messages" "$T/tcp.err" || { cat "$T/tcp.err"; fail "tcp: no worker used messages"; }
for p in $HAND; do wait "$p" 2>/dev/null; done
HAND=""

# the plan: printable, every expert once
"$G" plan -m "$T/mixed.gguf" --cpu-workers 3 >"$T/plan.txt" 2>&1 || { cat "$T/plan.txt"; fail "guild plan"; }
grep -q "experts 0-5 of every layer" "$T/plan.txt" && grep -q "experts 6-10 of every layer" "$T/plan.txt" &&
    grep -q "experts 11-15 of every layer" "$T/plan.txt" || { cat "$T/plan.txt"; fail "guild plan: unexpected split"; }
"$G" run -m "$T/mixed.gguf" --cpu-workers 3 --print-plan >"$T/plan2.txt" 2>&1 || fail "guild run --print-plan"
cmp -s "$T/plan.txt" "$T/plan2.txt" || fail "guild run --print-plan differs from guild plan"
"$G" plan -m "$T/mixed.gguf" --cpu-workers 17 >"$T/plan3.txt" 2>&1 && fail "17 workers for 16 experts accepted"
grep -q "17 CPU workers: expected 1 to 16" "$T/plan3.txt" || { cat "$T/plan3.txt"; fail "plan error message"; }

# -v: a CPU worker's pipeline profile every 1,024 decode exchanges gives the dense side's turnaround a layer as it
# sees it (its done ring to the next step ring, the median): 300 tokens of a 4-layer model are 1,200 exchanges
"$MK" --arch qwen3moe --layers 4 --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --experts 4 --experts-used 2 \
    --expert-ff 64 --ctx 512 --type Q8_0 --seed 3 -q -o "$T/turn.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; fail "guild-mkmodel (turnaround)"; }
"$G" run -m "$T/turn.gguf" -p hi -n 300 --temp 0 --ignore-eos --threads 1 -v >/dev/null 2>"$T/turn.err" ||
    { tail -n 20 "$T/turn.err"; fail "guild run -v"; }
grep -a "pipeline profile" "$T/turn.err" | grep -aqE "dense_turnaround_us=[0-9]+\.[0-9] \(median of [0-9]+\)" ||
    { grep -a "pipeline profile" "$T/turn.err"; fail "-v: no dense turnaround in the CPU worker's profile"; }
# the same turnaround counted in the workers' Stats: between a decode step's exchanges of one token, 3 a step of
# this model's 4 MoE layers (about 40 decode steps of 40 tokens), in --stats and in guild bench run's runs
"$G" run -m "$T/turn.gguf" -p hi -n 40 --temp 0 --ignore-eos --threads 1 --stats >/dev/null 2>"$T/turn2.err" ||
    { tail -n 20 "$T/turn2.err"; fail "guild run --stats (turnaround)"; }
turns=$(sed -n "s/.*dense side's turnaround.*: \([0-9.]*\) us a layer (mean of \([0-9]*\))/\1 \2/p" "$T/turn2.err")
awk -v t="$turns" 'BEGIN { split(t, v, " "); exit !(v[1] > 0 && v[2] >= 3 * 38 && v[2] <= 3 * 40) }' ||
    { grep -a "turnaround" "$T/turn2.err"; fail "--stats: turnaround '$turns' (us, count: 114-120 expected)"; }
"$G" bench run -m "$T/turn.gguf" --backend cpu --populate 16 --runs 2 --gen 16 --threads 1 --json "$T/turn.json" \
    >/dev/null 2>"$T/turn3.err" || { tail -n 20 "$T/turn3.err"; fail "guild bench run (turnaround)"; }
[ "$(grep -ac "run [0-9]:.*, turnaround [0-9.]* us" "$T/turn3.err")" = 2 ] &&
    [ "$(grep -o '"dense_turnaround_us": [0-9.]*' "$T/turn.json" | grep -cv ': 0$')" = 2 ] ||
    { cat "$T/turn3.err" "$T/turn.json"; fail "guild bench run: no turnaround in each run's line and JSON"; }

# without the worker binaries: a clear error, not a hang
mkdir "$T/bin"
cp "$G" "$T/bin/guild"
"$T/bin/guild" run -m "$T/mixed.gguf" -p hi -n 2 >"$T/nobin.txt" 2>&1 && fail "ran without guild-cpu-worker"
grep -q "guild-cpu-worker.*--single-process does not" "$T/nobin.txt" || { cat "$T/nobin.txt"; fail "missing worker message"; }

echo "PASS: multi-process == single-process (tokens, logits, text) for 9 architectures x 1-3 CPU workers ($n runs), a split model, mixed types, named arena, hand-started workers, exchanges as messages over tcp, plans, the dense turnaround at -v, in --stats and in guild bench run"
