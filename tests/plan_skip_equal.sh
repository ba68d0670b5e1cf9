#!/bin/sh
# The GPU plan's resident experts one by one (issue 14), without a GPU: the cpu backend given --gpu-mem stands in
# for a device of that size (it computes the plan's resident experts itself, with the CPU workers' kernels), so
# the placement's per-expert skip sets are exercised end to end. With a routing profile beside the model whose
# hot experts are known:
#   - `guild plan` keeps exactly the hottest experts resident and gives the CPU workers the others;
#   - the multi-process pipeline (1 and 2 CPU workers, which load only their non-resident experts) gives the
#     same tokens and logits, byte for byte, as --single-process with the same plan, and as the plain
#     single-process reference without one;
#   - --stats works in both modes and prints the same routing and the GPU hit rate (> 0);
#   - --record-routing writes a profile that plans again; a malformed profile is a clear error naming the
#     file, which --no-tuning ignores.
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK" "$G" "$B/guild-gpu-worker" "$B/guild-cpu-worker"
T=$(mktemp -d) || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT INT TERM

L=3
E=16
"$MK" --arch qwen3moe --layers $L --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts $E --experts-used 4 \
    --expert-ff 256 --ctx 256 --type Q4_K --seed 21 -q -o "$T/m.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; fail "guild-mkmodel"; }

# the profile: in every layer experts 2, 9 and 13 are hot, the others cold and distinct
{
    printf 'version = 1\nlayers = %d\nexperts = %d\nexperts_used = 4\ntokens = 100000\n' $L $E
    il=0
    while [ $il -lt $L ]; do
        printf 'layer %d =' $il
        e=0
        while [ $e -lt $E ]; do
            case $e in 2 | 9 | 13) printf ' %d' $((30000 + il)) ;; *) printf ' %d' $((e + 1)) ;; esac
            e=$((e + 1))
        done
        printf '\n'
        il=$((il + 1))
    done
} >"$T/m.gguf.routing"

# the smallest budget (in KiB) whose plan keeps some experts resident but not all
resident() { # budget: the plan's resident experts
    "$G" plan -m "$T/m.gguf" --backend cpu --gpu-mem "$1" --cpu-workers 2 --batch 7 2>/dev/null |
        sed -n 's/.*, \([0-9]*\) experts in all.*/\1/p'
}
base=$("$G" plan -m "$T/m.gguf" --backend cpu --gpu-mem 64G --cpu-workers 2 2>"$T/plan-all.err" |
    sed -n 's/.*dense weights \([0-9.]*\) GiB.*/\1/p')
[ -n "$base" ] || { cat "$T/plan-all.err"; fail "guild plan with the cpu backend and --gpu-mem prints no GPU plan"; }
# the CUDA context and the driver's share (the plan's reserve): below them nothing fits
ovh=$("$G" plan -m "$T/m.gguf" --backend cpu --gpu-mem 64G --cpu-workers 2 2>/dev/null |
    sed -n "s/.*CUDA context ~\([0-9.]*\) GiB, the driver's share ~\([0-9.]*\) GiB.*/\1 \2/p" |
    awk '{printf "%d", ($1 + $2) * 1024 - 16}')
[ -n "$ovh" ] || fail "guild plan prints no CUDA context and driver's share"
kib=$((ovh * 1024))
budget=""
while [ $kib -lt $(((ovh + 160) * 1024)) ]; do
    n=$(resident "${kib}K")
    if [ -n "$n" ] && [ "$n" -ge 9 ] && [ "$n" -lt $((L * E)) ]; then
        budget="${kib}K"
        break
    fi
    kib=$((kib + 64))
done
[ -n "$budget" ] || fail "no budget between $ovh and $((ovh + 160)) MiB keeps some experts resident"
"$G" plan -m "$T/m.gguf" --backend cpu --gpu-mem "$budget" --cpu-workers 2 --batch 7 >"$T/plan.txt" 2>&1 ||
    { cat "$T/plan.txt"; fail "guild plan --gpu-mem $budget"; }
grep -q "the hottest experts of the routing profile" "$T/plan.txt" || { cat "$T/plan.txt"; fail "plan: not from the profile"; }
grep -q "experts of the other layers stay on the GPU too" "$T/plan.txt" || grep -q "stay on the GPU" "$T/plan.txt" ||
    { cat "$T/plan.txt"; fail "plan: the placement keeps no expert on the GPU"; }
n_res=$(resident "$budget")
# the hottest first: with 3 x 3 hot experts and room for at least 6, the hot ones of layers 0 and 1 are in
[ "$n_res" -ge 9 ] && hot_all=1 || hot_all=0

PROMPT="The quick brown fox jumps over the lazy dog, and then it runs away into the forest again."
run() { # name, extra args...
    name=$1
    shift
    "$G" run -m "$T/m.gguf" -p "$PROMPT" -n 12 --temp 0.8 --seed 5 --threads 1 --batch 7 --backend cpu \
        --ids-out "$T/$name.ids" --logits-out "$T/$name.logits" "$@" >"$T/$name.txt" 2>"$T/$name.err" ||
        { cat "$T/$name.err"; fail "guild run $name $*"; }
}
same() { # reference, name
    for f in ids logits txt; do
        cmp -s "$T/$1.$f" "$T/$2.$f" || fail "$2: $f differ from $1"
    done
}

run ref --single-process --no-tuning
run single --single-process --gpu-mem "$budget" --stats
same ref single
grep -q "stats: GPU hit rate" "$T/single.err" || { cat "$T/single.err"; fail "single: no hit rate"; }
for k in 1 2; do
    run "multi$k" --cpu-workers $k --spin-us 0 --gpu-mem "$budget" --stats -v
    same ref "multi$k"
    # the CPU workers loaded only the experts the GPU does not keep
    loaded=$(sed -n 's/.*ready as worker [0-9]*: \([0-9]*\) experts.*/\1/p' "$T/multi$k.err" | awk '{s += $1} END {print s}')
    [ "$loaded" -eq $((L * E - n_res)) ] ||
        { grep "ready as worker" "$T/multi$k.err"; fail "multi$k: the CPU workers hold $loaded experts, not $((L * E - n_res))"; }
    grep -q "stats: GPU hit rate" "$T/multi$k.err" || { cat "$T/multi$k.err"; fail "multi$k: no hit rate"; }
    grep "^stats: layer" "$T/single.err" >"$T/s.stats"
    grep "^stats: layer" "$T/multi$k.err" >"$T/m.stats"
    cmp -s "$T/s.stats" "$T/m.stats" || fail "multi$k: --stats counts differ from the single process's"
done
hit=$(sed -n 's/^stats: GPU hit rate \([0-9.]*\)%.*/\1/p' "$T/multi2.err")
awk -v h="$hit" 'BEGIN { exit !(h > 0) }' || fail "the GPU hit rate is $hit"

# --record-routing: a profile of this run, added to on the next, plans again
run rec --single-process --no-tuning --record-routing "$T/rec.routing"
run rec2 --cpu-workers 2 --spin-us 0 --no-tuning --record-routing "$T/rec.routing"
tokens=$(sed -n 's/^tokens = //p' "$T/rec.routing")
[ -n "$tokens" ] && [ "$tokens" -gt 0 ] || { cat "$T/rec.routing"; fail "--record-routing wrote no tokens"; }
cp "$T/rec.routing" "$T/m.gguf.routing"
"$G" plan -m "$T/m.gguf" --backend cpu --gpu-mem "$budget" --batch 7 >"$T/plan2.txt" 2>&1 ||
    { cat "$T/plan2.txt"; fail "guild plan with the recorded profile"; }
grep -q "the hottest experts of the routing profile" "$T/plan2.txt" || { cat "$T/plan2.txt"; fail "recorded profile unused"; }

# a malformed profile: a clear error naming the file; --no-tuning ignores it
printf 'version = 1\nlayers = 2\n' >"$T/m.gguf.routing"
if "$G" run -m "$T/m.gguf" -p hi -n 1 --backend cpu --gpu-mem "$budget" --single-process >/dev/null 2>"$T/bad.err"; then
    fail "a malformed routing profile was accepted"
fi
grep -q "m.gguf.routing" "$T/bad.err" || { cat "$T/bad.err"; fail "the error does not name the profile"; }
run noprof --single-process --gpu-mem "$budget" --no-tuning
same ref noprof
echo "ok: $n_res of $((L * E)) experts resident at --gpu-mem $budget (hot set complete: $hot_all); multi-process = single process"
