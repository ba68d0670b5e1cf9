#!/bin/sh
# guild run end to end (llama2.c style known-good test): a fixed generated model, prompt and seed give exactly
# the token ids below, sampled and greedy; and the same ids, text and logits (byte for byte) with another
# thread count and prompt batch size. The ids change only when the forward pass, the sampler or
# guild-mkmodel's weights change on purpose: then check the new ones against the float64 reference
# (tests/ref) before pinning them here.
set -u
B=${GUILD_BUILDDIR:-.}
MK=$B/tools/guild-mkmodel
G=$B/guild
if [ ! -x "$MK" ]; then
    echo "SKIP: $MK is not built"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

fail() {
    echo "FAIL: $*"
    exit 1
}

"$MK" --arch qwen3moe --layers 3 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 16 --experts-used 4 \
    --expert-ff 256 --ctx 512 --type Q4_K --seed 7 -o "$T/m.gguf" >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel"; }

run() { # name, extra args...
    name=$1
    shift
    "$G" run -m "$T/m.gguf" -p "The quick brown fox jumps over the lazy dog." -n 24 --ids-out "$T/$name.ids" \
        --logits-out "$T/$name.logits" "$@" >"$T/$name.txt" 2>"$T/$name.err" || { cat "$T/$name.err"; fail "guild run $*"; }
}

run sampled --seed 42 --temp 0.9 --threads 1
run greedy --temp 0 --threads 1
run sampled2 --seed 42 --temp 0.9 --threads 2 --batch 3
run greedy2 --temp 0 --threads 2 --batch 1

EXPECT_SAMPLED="3637 2276 3821 3969 2897 1208 1545 3252 842 631 1550 4024 810 1918 3332 2887 1562 599 3725 887 2806 2192 3094 1534"
EXPECT_GREEDY="3637 687 3507 984 3864 3729 1735 3858 1003 1873 1565 3857 218 2230 964 1014 1668 2127 3920 917 2746 1224 3352 3501"
got=$(cat "$T/sampled.ids")
[ "$got" = "$EXPECT_SAMPLED" ] || fail "sampled ids: got '$got', expected '$EXPECT_SAMPLED'"
got=$(cat "$T/greedy.ids")
[ "$got" = "$EXPECT_GREEDY" ] || fail "greedy ids: got '$got', expected '$EXPECT_GREEDY'"
for f in ids logits txt; do
    cmp -s "$T/sampled.$f" "$T/sampled2.$f" || fail "sampled: $f differ between 1 thread/batch 256 and 2 threads/batch 3"
    cmp -s "$T/greedy.$f" "$T/greedy2.$f" || fail "greedy: $f differ between 1 thread/batch 256 and 2 threads/batch 1"
done
size=$(wc -c <"$T/greedy.logits")
n_vocab=$(grep -o 'n_vocab = [0-9]*' "$T/greedy.err" | head -1 | cut -d' ' -f3)
[ "$size" -eq $((24 * 4 * n_vocab)) ] || fail "logits file has $size bytes, expected 24 rows of $n_vocab floats"
grep -q 'prefill: .* tok/s' "$T/greedy.err" || fail "no prefill timing on stderr"
grep -q 'decode: .* tok/s' "$T/greedy.err" || fail "no decode timing on stderr"
echo "PASS: known-good ids, identical across threads and batch sizes"
