#!/usr/bin/env bash
# Session 41's fifth call: the exchange's wait and take of y in one launch for a decode step's few tokens
# (xchg_wait_take_kernel). Pack in $C: bin/ (the build, every CUDA test), base/ (the build before it, f800dcd):
#   C=/tmp/c bash bench/device/s41e.sh [SECONDS]
# 1. check_cuda_backend (its arena tests drive the exchange from the device: bits, timeout, cancel) beside
#    tests/cuda/spec_cuda.sh (two CPU workers);
# 2. issue 18's sessions measure, new then base: the step's time outside the CPU wait ("out ms") is what moves.
# Output under $OUT: s41e.log and s41e-files.tar.gz.
set -u
budget=${1:-200}
. bench/device/lib.sh # say, step, setup, finish, sessions8
setup s41e
export CK_DEFAULT_TIMEOUT=300
(step 100 "check_cuda_backend" sh -c '"$0" > "'"$O"'/check_cuda_backend.txt" 2>&1; st=$?;
    grep -E "^[0-9]+%|exchange from the device|fail|FAIL" "'"$O"'/check_cuda_backend.txt" | head -n 12; exit $st' \
    "$B/tests/cuda/check_cuda_backend") &
p1=$!
(step 100 "spec_cuda.sh" sh -c 'env GUILD_BUILDDIR="$0" sh tests/cuda/spec_cuda.sh > "'"$O"'/spec_cuda.txt" 2>&1;
    st=$?; tail -n 3 "'"$O"'/spec_cuda.txt"; exit $st' "$B") &
p2=$!
wait $p1 $p2
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s41e; exit 1; }
sessions8 new "$B" "$commit" 3
sessions8 base "$BASE" f800dcd 3
rm -f $m
finish s41e
