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

# Experts resident on the "GPU" (issue 14; the cpu backend stands in for a device of --gpu-mem, tests/
# plan_skip_equal.sh): a routing profile makes layer 1 hot whole and experts 2, 9, 13 hot in the others, and the
# smallest budget that keeps layer 1 and more resident (but not everything) places them; the hints then name only
# the experts the CPU workers compute (none for layer 1). Multi-process with hints = --single-process, bit for
# bit, also in prompt chunks of 3 tokens (hints of several rows), and the end line reports the hints.
{
    printf 'version = 1\nlayers = 4\nexperts = 16\nexperts_used = 4\ntokens = 1000000\n'
    for il in 0 1 2 3; do
        printf 'layer %d =' $il
        for e in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
            case $il:$e in
            1:*) printf ' 50000' ;;
            *:2 | *:9 | *:13) printf ' %d' $((30000 + il)) ;;
            *) printf ' %d' $((e + 1)) ;;
            esac
        done
        printf '\n'
    done
} >"$T/hot.routing"
resident() { # budget [batch]: the plan's resident experts
    "$G" plan -m "$T/m.gguf" --backend cpu --gpu-mem "$1" --routing "$T/hot.routing" --cpu-workers 2 --batch "${2:-5}" \
        2>/dev/null | sed -n 's/.*, \([0-9]*\) experts in all.*/\1/p'
}
ovh=$("$G" plan -m "$T/m.gguf" --backend cpu --gpu-mem 64G --cpu-workers 2 2>/dev/null |
    sed -n "s/.*CUDA context ~\([0-9.]*\) GiB, the driver's share ~\([0-9.]*\) GiB.*/\1 \2/p" |
    awk '{printf "%d", ($1 + $2) * 1024 - 16}')
[ -n "$ovh" ] || fail "guild plan prints no CUDA context and driver's share"
# the smallest budget (KiB) that holds every expert (bisected), then down from it to one that holds 22-63
lo=$((ovh * 1024))
hi=$(((ovh + 256) * 1024))
[ "$(resident "${hi}K")" = 64 ] || fail "--gpu-mem $((ovh + 256))M does not hold every expert"
while [ $((hi - lo)) -gt 64 ]; do
    mid=$(((lo + hi) / 2))
    if [ "$(resident "${mid}K")" = 64 ]; then hi=$mid; else lo=$mid; fi
done
kib=$((hi - 64))
budget=""
while [ $kib -gt $((hi - 64 * 48)) ]; do
    n=$(resident "${kib}K")
    n3=$(resident "${kib}K" 3)
    if [ -n "$n" ] && [ "$n" -ge 22 ] && [ "$n" -lt 64 ] && [ -n "$n3" ] && [ "$n3" -ge 22 ] && [ "$n3" -lt 64 ]; then
        budget="${kib}K"
        break
    fi
    kib=$((kib - 64))
done
[ -n "$budget" ] || fail "no budget within 3 MiB below ${hi}K keeps 22-63 experts resident (batches of 5 and 3)"
place="--backend cpu --gpu-mem $budget --routing $T/hot.routing"
run rsingle "$T/m.gguf" --single-process $place
same single rsingle
for b in 5 3; do
    for k in 1 2; do
        run "res$b-$k" "$T/m.gguf" --cpu-workers $k --spin-us 0 --batch $b $place
        same single "res$b-$k"
        grep -q "prefetch: [0-9]* of [0-9]* hinted experts routed" "$T/res$b-$k.err" ||
            { cat "$T/res$b-$k.err"; fail "resident experts, batch $b, $k workers: no prefetch hints"; }
    done
done
"$G" run -m "$T/m.gguf" -p hi -n 1 --prefetch-experts -1 >"$T/neg.txt" 2>&1 && fail "--prefetch-experts -1 accepted"
grep -q "prefetch-experts" "$T/neg.txt" || { cat "$T/neg.txt"; fail "--prefetch-experts -1: no message naming it"; }
echo "prefetch_equal: ids and logits equal with --prefetch-experts 1, 4, 9 (1 and 2 workers), the default and 0," \
    "and with $n of 64 experts resident at --gpu-mem $budget (batches of 5 and 3)"
