#!/bin/sh
# `guild bench bw` end to end, small: each way of reading (own slices or expert-matrix pieces of shared memory,
# plain loads or with the kernels' read-ahead) prints its line `read node=N threads=K read=R piece=P median_GBps=X
# best_GBps=Y` with positive rates; a bad --read or a --piece that is not a byte count >= 0 is a usage error (2)
# naming it.
set -u
. "$(dirname "$0")/../tests/test_lib.sh"
need_built "$G"
make_tmp

for read in plain ahead; do
    for piece in 0 262144; do
        "$G" bench bw --gb 0.064 --passes 2 --threads 1 --read $read --piece $piece >"$T/out" 2>"$T/err" ||
            { st=$?; cat "$T/err"; fail "--read $read --piece $piece: exit status $st"; }
        grep -Eq "^read node=0 threads=1 read=$read piece=$piece median_GBps=[0-9]*[1-9][0-9]*\.[0-9]+ best_GBps=[0-9.]+$" \
            "$T/out" || { cat "$T/out"; fail "--read $read --piece $piece: no line of that read"; }
    done
done
"$G" bench bw --read sideways >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 2 ] || fail "--read sideways: exit status $st, expected 2"
grep -qF -- "--read sideways: expected plain or ahead" "$T/err" || fail "--read sideways: not named"
"$G" bench bw --piece -5 >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 2 ] || fail "--piece -5: exit status $st, expected 2"
grep -qF -- "--piece -5" "$T/err" || fail "--piece -5: not named"
"$G" bench bw --piece 12k >"$T/out" 2>"$T/err"
st=$?
[ "$st" -eq 2 ] || fail "--piece 12k: exit status $st, expected 2"
grep -qF -- "--piece 12k" "$T/err" || fail "--piece 12k: not named"
echo "PASS: guild bench bw"
