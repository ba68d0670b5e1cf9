#!/bin/sh
# guild-cuda-prof's command line: --help works, no -m is a usage error (2), and a run with a missing model exits 1
# with a clear message: "no CUDA device" on a machine without a GPU, the model's path on one with a GPU. With a
# GPU, it also profiles a tiny guild-mkmodel model for 2 steps and checks that the report has kernels in it, and
# that --phases --no-trace prints the step clock.
set -u
B=${GUILD_BUILDDIR:-.}
P=$B/bench/guild-cuda-prof
MK=$B/tools/guild-mkmodel
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
grep -qF -- "--steps S" "$T/out" || fail "--help lacks --steps"
grep -qF -- "--phases" "$T/out" || fail "--help lacks --phases"

timeout 60 "$P" >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 2 ] || fail "no -m: exit status $st, expected 2"
grep -qF "no model" "$T/err" || fail "no -m: message lacks 'no model'"

timeout 120 "$P" -m "$T/missing.gguf" --steps 2 >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 1 ] || fail "missing model: exit status $st, expected 1"
if grep -qF "no CUDA device" "$T/err"; then
    echo "no GPU here: the program says so ($(cat "$T/err"))"
    exit 0
fi
grep -qF "missing.gguf" "$T/err" || fail "missing model: the message names neither the model nor the missing GPU"

# A GPU: a real (tiny) profile.
[ -x "$MK" ] || { echo "SKIP: $MK is not built"; exit 77; }
"$MK" --arch qwen3moe --layers 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --experts-used 2 \
    --expert-ff 128 --ctx 256 --type Q4_K --seed 7 -o "$T/m.gguf" >"$T/err" 2>&1 || fail "guild-mkmodel"
timeout 300 "$P" -m "$T/m.gguf" --populate 16 --steps 2 --threads 2 >"$T/out" 2>"$T/err" || fail "profile: exit status $?"
cat "$T/out"
grep -q "^step wall" "$T/out" || fail "profile: no step wall line"
grep -qE "^kernels per step [1-9]" "$T/out" || fail "profile: no kernels traced"
# the step clock, untraced: its table, every span known
timeout 300 "$P" -m "$T/m.gguf" --populate 16 --steps 2 --threads 2 --no-trace --phases >"$T/out" 2>"$T/err" ||
    fail "--phases: exit status $?"
cat "$T/out"
grep -q "^step clock over 2 forward passes (2 replayed graphs)" "$T/out" || fail "--phases: no step clock"
grep -qE "^  device: -> last layer done +[0-9]" "$T/out" || fail "--phases: no span of the layers"
exit 0
