#!/bin/sh
# guild-cuda-chain-bench's command line: --help works, bad options are usage errors (2), and a run exits 1 with
# "no CUDA device" on a machine without a GPU. With a GPU, a small step (2 layers x 3 phases, 0 and 64 KiB a phase)
# runs every variant and each one's activation vector equals the scalar reference.
set -u
B=${GUILD_BUILDDIR:-.}
P=$B/bench/guild-cuda-chain-bench
if [ ! -x "$P" ]; then
    echo "SKIP: $P is not built"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

fail() {
    [ -f "$T/err" ] && cat "$T/err"
    echo "FAIL: $*"
    exit 1
}

"$P" --help >"$T/out" 2>"$T/err" || fail "--help: exit status $?"
grep -qF -- "--phases P" "$T/out" || fail "--help lacks --phases"
for bad in "--threads 48" "--kib 1,x" "--layers 0" "--bogus" "extra"; do
    # shellcheck disable=SC2086
    "$P" $bad >"$T/out" 2>"$T/err"
    st=$?
    [ "$st" -eq 2 ] || fail "'$bad': exit status $st, expected 2"
    grep -q "guild-cuda-chain-bench: " "$T/err" || fail "'$bad': no message"
done

timeout 120 "$P" --layers 2 --phases 3 --kib 0,64 --reps 3 >"$T/out" 2>"$T/err"
st=$?
if [ "$st" -ne 0 ] && grep -qF "no CUDA device" "$T/err"; then
    [ "$st" -eq 1 ] || fail "no GPU: exit status $st, expected 1"
    echo "no GPU here: the program says so ($(cat "$T/err"))"
    exit 0
fi
[ "$st" -eq 0 ] || fail "small step: exit status $st"
n=$(grep -c "= reference" "$T/out")
[ "$n" -eq 8 ] || { cat "$T/out"; fail "expected 8 variants equal to the reference, got $n"; }
cat "$T/out"
echo "PASS: chain bench"
