#!/usr/bin/env bash
# Session 29, logits (issue 18), second short call: check_cuda_pick with its backend case fixed (the first call's
# prompts were 18 tokens for a batch of 16), then tests/pick_equal.sh with --backend cuda: greedy ids from the
# device's picks = from the rows (--logits-out), one process and the pipeline's GPU worker. The call carried this
# script and tests/pick_equal.sh in .carry-logits/ (the device's tree was main's, without them).
# Usage: C=/tmp/c bash .carry-logits/logits2.sh
set -u
t0=$(date +%s)
C=${C:-/tmp/c}
B=$C/bin
export LD_LIBRARY_PATH=$C/lib
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee -a "$O/run2.log") 2>&1
echo "== new $(cat "$C/COMMIT" 2> /dev/null)"
timeout -s KILL 40 "$B/tests/cuda/check_cuda_pick" > "$O/check_cuda_pick2.log" 2>&1
echo "rc=$? (check_cuda_pick) +$(($(date +%s) - t0))s"
tail -n 3 "$O/check_cuda_pick2.log"
mkdir -p /tmp/t && cp .carry-logits/pick_equal.sh tests/test_lib.sh /tmp/t/
GUILD_BUILDDIR=$B GUILD_SRCDIR=. PYTHON=python3 timeout -s KILL 50 sh /tmp/t/pick_equal.sh --backend cuda
echo "rc=$? (pick_equal.sh --backend cuda) +$(($(date +%s) - t0))s"
