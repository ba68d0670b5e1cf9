#!/bin/sh
# guild bench sessions end to end on a tiny model, cpu backend in one process and on the multi-process pipeline:
# a line per session count with a positive rate, distinct experts that grow with the sessions and never pass the
# model's experts, the limit and the JSON; on the pipeline, a step of more sessions than the default 8 logits rows
# a request is still one step request (requests_per_step 1: rows cut into several requests would each read the
# step's experts again); usage errors.
set -u
B=${GUILD_BUILDDIR:-.}
if [ ! -x "$B/guild" ] || [ ! -x "$B/tools/guild-mkmodel" ]; then
    echo "SKIP: guild or guild-mkmodel is not built"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
fail() {
    echo "FAIL: $*"
    exit 1
}
"$B/tools/guild-mkmodel" --arch qwen3moe --layers 2 --embd 128 --heads 2 --kv-heads 1 --head-dim 64 --experts 16 \
    --experts-used 4 --expert-ff 128 --ctx 512 --vocab 796 --type Q8_0 --seed 5 -q -o "$T/m.gguf" || fail "guild-mkmodel"
for mode in --single-process "--cpu-workers 1"; do
    # shellcheck disable=SC2086
    timeout 120 "$B/guild" bench sessions -m "$T/m.gguf" --backend cpu $mode --threads 2 --sessions 1,4,12 \
        --prompt 12 --gen 4 --dram-gbs 10 --json "$T/s.json" > "$T/out.txt" 2> "$T/err.txt" ||
        { cat "$T/err.txt"; fail "guild bench sessions $mode"; }
    cat "$T/out.txt"
    # sessions, tok/s, distinct "cpu+gpu": 1 session touches at most top-k per layer, 12 at least that
    awk '/^ *[0-9]+ / { n[$1] = 1; if ($2 <= 0) bad = "rate " $2; split($5, d, "+");
                        if (d[1] + d[2] > 16) bad = "distinct " $5;
                        if ($1 == 1 && d[1] + d[2] > 4.001) bad = "one session touches " $5;
                        if ($1 == 12 && d[1] + d[2] < 4) bad = "twelve sessions touch " $5 }
         END { if (!(1 in n) || !(4 in n) || !(12 in n)) bad = bad " missing sizes"; if (bad != "") { print bad; exit 1 } }' \
        "$T/out.txt" || fail "guild bench sessions $mode: the table"
    grep -q '"fraction_of_limit"' "$T/s.json" && grep -q '"distinct_cpu_experts_per_layer"' "$T/s.json" ||
        fail "guild bench sessions $mode: the JSON"
    if [ "$mode" != --single-process ]; then
        r=$(grep -c '"requests_per_step": 1\.0,' "$T/s.json")
        [ "$r" = 3 ] || fail "guild bench sessions $mode: requests a step: $(grep requests_per_step "$T/s.json")"
    fi
done
"$B/guild" bench sessions -m "$T/m.gguf" --sessions 0 > /dev/null 2> "$T/err.txt" && fail "--sessions 0 accepted"
grep -q "sessions" "$T/err.txt" || fail "--sessions 0: $(cat "$T/err.txt")"
echo "PASS"
