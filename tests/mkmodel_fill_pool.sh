#!/bin/sh
# guild-mkmodel --fill pool end to end: a model with pooled tensors (the 32 experts of each layer, token_embd,
# output) is the same file with 1 and 2 threads, the same size as --fill exact but other bytes, reads back with
# `guild inspect`, and `guild run` generates from it (greedy, ids within the vocabulary, the same ids with 1 and
# 2 threads). The values of pooled tensors are checked in tests/check_mkmodel.
set -u
B=${GUILD_BUILDDIR:-.}
MK=$B/tools/guild-mkmodel
G=$B/guild
if [ ! -x "$MK" ] || [ ! -x "$G" ]; then
    echo "SKIP: $MK or $G is not built"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

fail() {
    echo "FAIL: $*"
    exit 1
}

FLAGS="--layers 2 --embd 256 --experts 32 --experts-used 4 --vocab 8000 --recipe Q4_K_M --seed 4"
mk() { # output, extra flags...
    out=$1
    shift
    # shellcheck disable=SC2086
    "$MK" $FLAGS "$@" -o "$T/$out" >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel $*"; }
}
mk pool1.gguf --fill pool --threads 1
mk pool2.gguf --fill pool --threads 2
mk exact.gguf --threads 2
grep -q -- "--fill pool" "$T/mk.log" && fail "the exact model's summary mentions --fill pool"
cmp -s "$T/pool1.gguf" "$T/pool2.gguf" || fail "--fill pool: --threads 1 and --threads 2 wrote different files"
[ "$(wc -c <"$T/pool1.gguf")" -eq "$(wc -c <"$T/exact.gguf")" ] || fail "--fill pool and exact differ in size"
cmp -s "$T/pool1.gguf" "$T/exact.gguf" && fail "--fill pool wrote the exact model's bytes (nothing pooled?)"

"$G" inspect "$T/pool1.gguf" >"$T/inspect.txt" 2>&1 || { cat "$T/inspect.txt"; fail "guild inspect"; }
for t in token_embd.weight output.weight blk.1.ffn_down_exps.weight; do
    grep -q "$t" "$T/inspect.txt" || fail "guild inspect does not list $t"
done

run() { # name, extra args...
    name=$1
    shift
    "$G" run --backend cpu -m "$T/pool1.gguf" -p "The river runs past the town." -n 12 --temp 0 --ids-out "$T/$name.ids" "$@" \
        >"$T/$name.txt" 2>"$T/$name.err" || { cat "$T/$name.err"; fail "guild run $*"; }
}
run a --threads 1
run b --threads 2
n=$(wc -w <"$T/a.ids")
[ "$n" -eq 12 ] || fail "guild run produced $n ids, expected 12: $(cat "$T/a.ids")"
ids=$(cat "$T/a.ids")
for id in $ids; do
    if [ "$id" -lt 0 ] || [ "$id" -ge 8000 ]; then
        fail "id $id is outside the vocabulary"
    fi
done
cmp -s "$T/a.ids" "$T/b.ids" || fail "ids differ between 1 and 2 threads: $(cat "$T/a.ids") / $(cat "$T/b.ids")"
echo "ok: pool model of $(wc -c <"$T/pool1.gguf") bytes, ids $(cat "$T/a.ids")"
