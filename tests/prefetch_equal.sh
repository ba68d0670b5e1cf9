#!/bin/sh
# --prefetch-experts (issue 17): the dense side's prediction of the next layer's experts only moves bytes into the
# CPU workers' caches, so the multi-process pipeline gives the same token ids and logits, byte for byte, with the
# prefetch on (1 expert a token, every expert a token, more than the model routes: cut) as off and as the single
# process, with 1 and 2 CPU workers, sampled, decoding and a prompt in several batches (the default, 4, on too); the
# end lines report the hints (hinted experts, those routed, the bytes prefetched); a negative count is refused.
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK" "$G" "$B/guild-gpu-worker" "$B/guild-cpu-worker"
make_tmp

PROMPT="The quick brown fox jumps over the lazy dog, and then it runs away into the forest."
run() { # name, model, extra args...
    name=$1
    model=$2
    shift 2
    "$G" run -m "$model" -p "$PROMPT" -n 16 --temp 0.8 --seed 3 --threads 1 --batch 5 \
        --ids-out "$T/$name.ids" --logits-out "$T/$name.logits" "$@" >"$T/$name.txt" 2>"$T/$name.err" ||
        { cat "$T/$name.err"; fail "guild run $name $*"; }
}
same() { # reference, name
    for f in ids logits txt; do
        cmp -s "$T/$1.$f" "$T/$2.$f" || fail "$2: $f differ from $1"
    done
}

"$MK" --arch qwen3moe --layers 4 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts 16 --experts-used 4 \
    --expert-ff 128 --ctx 256 --type Q4_K --seed 21 -q -o "$T/m.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; fail "guild-mkmodel"; }
run single "$T/m.gguf" --single-process
run off "$T/m.gguf" --cpu-workers 1 --spin-us 0 --prefetch-experts 0
same single off
run default "$T/m.gguf" --cpu-workers 1 --spin-us 0
same single default
grep -q "prefetch: [0-9]* of [0-9]* hinted experts routed" "$T/default.err" ||
    { cat "$T/default.err"; fail "no prefetch by default"; }
for n in 1 4 9; do
    for k in 1 2; do
        run "on$n-$k" "$T/m.gguf" --cpu-workers $k --spin-us 0 --prefetch-experts $n
        same single "on$n-$k"
        grep -q "prefetch: [0-9]* of [0-9]* hinted experts routed" "$T/on$n-$k.err" ||
            { cat "$T/on$n-$k.err"; fail "--prefetch-experts $n, $k workers: no prefetch counters"; }
    done
done
grep -q "prefetch:" "$T/off.err" && fail "prefetch counters with --prefetch-experts 0"
"$G" run -m "$T/m.gguf" -p hi -n 1 --prefetch-experts -1 >"$T/neg.txt" 2>&1 && fail "--prefetch-experts -1 accepted"
grep -q "prefetch-experts" "$T/neg.txt" || { cat "$T/neg.txt"; fail "--prefetch-experts -1: no message naming it"; }
echo "prefetch_equal: ids and logits equal with --prefetch-experts 1, 4, 9 (1 and 2 workers), the default and 0"
