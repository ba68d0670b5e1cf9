#!/usr/bin/env bash
# Session 43's sixth call: the tensor-core cluster form as the default (branch s43-cl, with --cuda-off attn-mma
# reaching the GPU worker): speculative decoding's token identity on the GPU and the A/B in the multi-process stack.
# Pack in $C: bin/ (guild, the workers, guild-mkmodel, guild-cuda-prof, tests/mk_mtp_oracle, cuda_attn_time):
#   C=/tmp/c bash bench/device/s43f.sh [SECONDS]
# 1. tests/cuda/spec_cuda.sh (its oracle now in the pack) and mkmodel_greedy.sh, beside guild-mkmodel's
#    qwen3-30b-a3b; cuda_attn_time --timeline and --short at 128, 512, 2048 keys (the default form's phases);
# 2. guild-cuda-prof --gpu-experts none (the busy column); all-GPU and experts-in-RAM decode at 512 positions,
#    default (new) and --cuda-off attn-mma (fma) in turns.
# Output under $OUT: s43f.log and s43f-files.tar.gz.
set -u
budget=${1:-420}
. bench/device/lib.sh # say, step, setup, finish
setup s43f
m=/tmp/q30b.gguf
(step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads 10 -q -o $m) &
mk=$!
for t in spec_cuda mkmodel_greedy; do
    step 120 "$t.sh" sh -c 'GUILD_BUILDDIR="$1" sh "tests/cuda/$0.sh" > "'"$O"'/$0.txt" 2>&1; st=$?;
        grep -E "FAIL|PASS|SKIP|accept" "'"$O"'/$0.txt" | tail -n 8; exit $st' "$t" "$B"
done
wait $mk
step 30 "cuda_attn_time --timeline" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/tl.txt"' \
    "$B/tests/cuda/cuda_attn_time" --timeline 128 512 2048
[ -s $m ] || { finish s43f; exit 1; }
step 40 "guild-cuda-prof --gpu-experts none" sh -c '"$0" "$@" > "'"$O"'/prof-new.txt" 2>&1; st=$?;
    grep -E "GPU busy|attn_decode" "'"$O"'/prof-new.txt" | head -n 3; exit $st' \
    "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --gpu-experts none
off() { case $1 in fma*) echo "--cuda-off attn-mma" ;; esac; }
for side in new fma new2 fma2; do
    # shellcheck disable=SC2046 # off: two words or none
    step 20 "all-GPU decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$B/guild" bench run -m "$m" --populate 512 --runs 3 --gen 64 --json "$O/gpu-$side.json" $(off $side)
done
for side in new fma new2 fma2; do
    # shellcheck disable=SC2046
    step 35 "experts in RAM decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$B/guild" bench run -m "$m" --populate 512 --runs 3 --gen 48 --gpu-experts none --json "$O/ram-$side.json" \
        $(off $side)
done
rm -f $m
finish s43f
