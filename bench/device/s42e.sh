#!/usr/bin/env bash
# Session 42's fifth call: s42d's Q/K preparation in the attention's launch, its loads first (the first tile's, the
# query row's and a new key's K/V rows all in flight before any arithmetic). Pack in $C as s42d's:
#   C=/tmp/c bash bench/device/s42e.sh [SECONDS]
# 1. check_cuda_fused whole (timed: s42d's alltests killed it at its 60 s limit inside the new cases), beside
#    check_cuda_batch, check_cuda_seq, check_cuda_backend and spec_cuda.sh;
# 2. guild-cuda-prof --gpu-experts none and all-GPU decode at 512, new and base in turns.
# Output under $OUT: s42e.log and s42e-files.tar.gz.
# Build: branch s42-prep at d44be66 (not landed).
set -u
budget=${1:-300}
. bench/device/lib.sh # say, step, setup, finish, bin_of, prof_ab, decode_ab
setup s42e
export CK_DEFAULT_TIMEOUT=300
t() { # NAME LIMIT: the test program NAME as a step, its wall time
    step "$2" "$1" sh -c 's=$(date +%s.%N); "$0" > "'"$O"'/$(basename "$0").txt" 2>&1; st=$?;
        grep -E "^[0-9]+%|FAIL|fail|Q/K prep.*16 rows.*default" "'"$O"'/$(basename "$0").txt" | head -n 6;
        echo "$(basename "$0"): $(echo "$(date +%s.%N) - $s" | bc) s"; exit $st' "$B/tests/cuda/$1"
}
(t check_cuda_fused 200) &
p1=$!
(t check_cuda_batch 100; t check_cuda_seq 100) &
p2=$!
(t check_cuda_backend 150) &
p3=$!
(step 100 "spec_cuda.sh" sh -c 'env GUILD_BUILDDIR="$0" sh tests/cuda/spec_cuda.sh > "'"$O"'/spec_cuda.txt" 2>&1;
    st=$?; tail -n 2 "'"$O"'/spec_cuda.txt"; exit $st' "$B") &
p4=$!
wait $p1 $p2 $p3 $p4
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s42e; exit 1; }
prof_ab new base new2 base2
decode_ab gpu new base new2 base2
rm -f $m
finish s42e
