#!/usr/bin/env bash
# Session 42's tenth call: the bit tests of the decode attention with four key steps unrolled (s42i's var, now the
# source's default): check_cuda_kernels (every decode attention case against the float64 reference), check_cuda_batch
# (a row's bits in every batch), check_cuda_seq, at once. Pack in $C: bin/tests/cuda/ (those three):
#   C=/tmp/c bash bench/device/s42j.sh [SECONDS]
# Output under $OUT: s42j.log and s42j-files.tar.gz.
set -u
budget=${1:-80}
. bench/device/lib.sh # say, step, setup, finish
setup s42j
export CK_DEFAULT_TIMEOUT=300
pids=
for t in check_cuda_kernels check_cuda_batch check_cuda_seq; do
    (step 70 "$t" sh -c '"$0" > "'"$O"'/$(basename "$0").txt" 2>&1; st=$?;
        grep -E "^[0-9]+%|FAIL" "'"$O"'/$(basename "$0").txt" | head -n 4; exit $st' "$B/tests/cuda/$t") &
    pids="$pids $!"
done
# shellcheck disable=SC2086 # the pids
wait $pids
finish s42j
