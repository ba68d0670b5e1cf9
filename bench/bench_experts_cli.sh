#!/bin/sh
# `guild bench experts` end to end on a tiny custom shape. An unknown type is a usage error (2) naming it, so is
# a shape using more experts than it has (saying why). A run whose working set (--gb) is smaller than what a
# decode run reads (the probe over the experts' memory once read past the end of the bank: a crash) prints one
# summary line per type in the format issue #5 fixes: `T tokens=N weight_GBps=X read_GBps=Y fraction=F ...`,
# with positive numbers. --layout plain and packed run and say so (`layout=...` on the summary line, the layout in
# the detail lines); a bad --layout is a usage error naming it. --routing random with --profile and --variant arms
# runs and prints the profile line and one line per arm (a prefetch hint's arm among them, which needs --gap-us); a
# bad --routing or --variant is a usage error naming it.
set -u
B=${GUILD_BUILDDIR:-.}
G=$B/guild
[ -x "$G" ] || { echo "SKIP: $G is not built"; exit 77; }
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

fail() {
    [ -f "$T/err" ] && cat "$T/err"
    echo "FAIL: $*"
    exit 1
}

"$G" bench experts --type bogus >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 2 ] || fail "--type bogus: exit status $st, expected 2"
grep -qF "bogus" "$T/err" || fail "--type bogus: the message does not name the type"

"$G" bench experts --shape 256x256:4:8 >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 2 ] || fail "--shape 256x256:4:8: exit status $st, expected 2"
grep -qF "USED <= EXPERTS" "$T/err" || fail "--shape 256x256:4:8: the message does not say why"

timeout 120 "$G" bench experts --shape 256x256:16:4 --type q4_K,iq4_xs --tokens 1 --gb 0.01 --runs 1 --steps 4 \
    --prefill 16 --threads 1 >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 0 ] || { cat "$T/out"; fail "tiny run: exit status $st"; }
for t in q4_K iq4_xs; do
    line=$(grep "^$t tokens=1 " "$T/out") || { cat "$T/out"; fail "no summary line for $t"; }
    echo "$line" | grep -Eq "^$t tokens=1 weight_GBps=[0-9]+\.[0-9]+ read_GBps=[0-9]+\.[0-9]+ fraction=[0-9]+\.[0-9]+ " ||
        fail "summary line of $t: $line"
    echo "$line" | grep -Eq "weight_GBps=0\.00 |read_GBps=0\.00 " && fail "a zero rate: $line"
done
"$G" bench experts --layout interleaved >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 2 ] || fail "--layout interleaved: exit status $st, expected 2"
grep -qF "interleaved" "$T/err" || fail "--layout interleaved: the message does not name it"

for l in plain packed; do
    timeout 120 "$G" bench experts --shape 256x256:16:4 --type q4_K,iq4_xs --tokens 1 --gb 0.01 --runs 1 --steps 4 \
        --prefill 16 --threads 1 --layout $l >"$T/out" 2>"$T/err"
    st=$?
    [ "$st" -eq 0 ] || { cat "$T/out"; fail "tiny run, --layout $l: exit status $st"; }
    for t in q4_K iq4_xs; do
        grep -Eq "^$t tokens=1 weight_GBps=[0-9]+\.[0-9]+ .* layout=$l\$" "$T/out" ||
            { cat "$T/out"; fail "--layout $l: the summary line of $t does not say layout=$l"; }
        grep -q "^# $t: .* layout $l\$" "$T/out" || { cat "$T/out"; fail "--layout $l: no detail line for $t"; }
    done
done
timeout 120 "$G" bench experts --shape 256x256:16:4 --type q4_K --tokens 4 --routing random --gb 0.01 --runs 2 \
    --steps 4 --prefill 0 --threads 2 --profile --gap-us 10 --variant min=32,guide=1 --variant threads=1,spin=100 \
    --variant lockwake=1,prefer=1 --variant hint=4,pindown=16 >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 0 ] || { cat "$T/out"; fail "--routing random --profile --variant: exit status $st"; }
grep -Eq "^q4_K tokens=4 weight_GBps=[0-9]+\.[0-9]+ .* routing=random distinct=[0-9.]+ " "$T/out" ||
    { cat "$T/out"; fail "--routing random: the summary line does not say routing=random"; }
grep -Eq "^profile q4_K tokens=4 runs=[1-9][0-9]* .* work=0\.[0-9]+ " "$T/out" || { cat "$T/out"; fail "no profile line"; }
[ "$(grep -c "^variant " "$T/out")" -eq 4 ] || { cat "$T/out"; fail "not one line per --variant"; }
[ "$(grep -c "^profile-variant " "$T/out")" -eq 4 ] || { cat "$T/out"; fail "not one profile line per --variant"; }
# a hint is prefetched in the gap between steps: without --gap-us it is refused, naming the arm
"$G" bench experts --shape 256x256:16:4 --type q4_K --tokens 8 --routing random --gb 0.01 --runs 1 --steps 2 \
    --prefill 0 --threads 2 --variant hint=2 >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 2 ] && grep -q "hint=2: .*--gap-us" "$T/err" || { cat "$T/err"; fail "hint without --gap-us: status $st"; }
for bad in "--routing sideways" "--variant bogus=1" "--variant hint=17"; do
    # shellcheck disable=SC2086
    "$G" bench experts $bad >"$T/out" 2>"$T/err"
    st=$?
    [ "$st" -eq 2 ] || fail "$bad: exit status $st, expected 2"
    grep -qF "${bad#* }" "$T/err" || fail "$bad: the message does not name it"
done
echo "bench experts: usage errors, tiny-bank runs (default, plain and packed layouts; random routing, the profile,"
echo "  variants) ok"
