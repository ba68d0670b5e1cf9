#!/usr/bin/env bash
# sessattn: the CUDA test programs of batched decode alone (run.sh's first call set CK_RUN_CASE empty for them,
# which runs no case): check_cuda_seq, check_cuda_batch, check_cuda_attn. Output: $OUT/tests2.log
set -u
t0=$(date +%s)
budget=${1:-100}
C=$PWD/.carry-sessattn
P=/tmp/c-sessattn
rm -rf $P; mkdir -p $P && tar -xJf "$C/c.tar.xz" -C $P
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
O=${OUT:-/tmp/out}
mkdir -p "$O"
. bench/device/lib.sh
say "commit $(cat $P/COMMIT)"
for t in seq batch attn; do
    step 60 "check_cuda_$t" sh -c '"$0" > "'"$O"'/t.txt" 2>&1; st=$?; cat "'"$O"'/t.txt" >> "'"$O"'/tests2.log"; grep -E "^[0-9]+%|FAIL|SKIP|Error|: 3 sequences|one launch" "'"$O"'/t.txt" | tail -n 40; exit $st' "$B/tests/cuda/check_cuda_$t"
done
rm -f "$O/t.txt"
say done
