#!/usr/bin/env bash
# Session 38's closing call (issues 18 and 17): the merged tip against main 7abef70, from the repo root with the pack
# unpacked in $C (bin/, lib/, COMMIT, base/ with main's guild, workers and stager, BASE_COMMIT):
#   C=/tmp/c bash bench/device/sess38.sh [SECONDS] [REPEAT] [ROUNDS]
# 1. the bits: whichever of the CUDA expert-kernel tests and the CPU kernel tests the pack holds;
# 2. guild-mkmodel writes the Qwen3-30B-A3B shape;
# 3. ROUNDS rounds of `guild bench sessions --sessions 1,2,4,8,16 --repeat REPEAT --probes 1` at 8G, new then base
#    (each build's default plan), pooled afterwards by `guild bench pool`;
# 4. decode with every expert in RAM (`--gpu-experts none`) and all on the GPU, alternating new and base;
# 5. when the pack holds it, tests/cuda/cuda_pairs_time 4 8 16 (helper mma38's untimed shape on main's kernel).
# Every step is budgeted (lib.sh's step). Output under $OUT: sess38.log and sess38-files.tar.gz.
set -u
budget=${1:-560}
repeat=${2:-5}
rounds=${3:-2}
. bench/device/lib.sh # say, step, setup, finish, sessions8, bin_of, decode_ab
setup sess38
for t in tests/cuda/check_cuda_pairs_mma tests/cuda/check_cuda_expert_mma tests/check_kernels \
    tests/check_expert_pipe; do
    [ -x "$B/$t" ] && step 90 "$t" sh -c '"$0" > "'"$O"'/$(basename "$0").txt" 2>&1; st=$?;
        tail -n 3 "'"$O"'/$(basename "$0").txt"; exit $st' "$B/$t"
done
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish sess38; exit 1; }
commit_of() { case $1 in base*) echo "$base_commit" ;; *) echo "$commit" ;; esac; }
for r in $(seq 1 "$rounds"); do
    for side in new base; do
        sessions8 "$side-$r" "$(bin_of $side)" "$(commit_of $side)" "$repeat"
    done
done
decode_ab ram new base new2 base2
decode_ab gpu new base
[ -x "$B/tests/cuda/cuda_pairs_time" ] && step 40 "cuda_pairs_time 4 8 16" sh -c '"$0" "$@" > "'"$O"'/pairs_time.txt" 2>&1;
    st=$?; tail -n 30 "'"$O"'/pairs_time.txt"; exit $st' \
    "$B/tests/cuda/cuda_pairs_time" 4 8 16
for f in "$O"/sessions-*.json; do [ -s "$f" ] && echo "$f"; done > "$O/pooled.list"
for side in new base; do
    step 15 "guild bench pool ($side)" sh -c '"$0" "$@" 2>&1 | tail -n 14' "$B/guild" bench pool \
        $(grep "sessions-$side-" "$O/pooled.list")
done
rm -f $m
finish sess38
