#!/usr/bin/env bash
# Session 41's second call (issue 17): s41a.sh's measurements after its tests (its first run passed every test
# program, then hung in a bare `wait`; see s41a.sh). The same pack in $C (bin/ new, var/ AD_SPLIT_MIN 32, base/ main):
#   C=/tmp/c bash bench/device/s41b.sh [SECONDS]
# 1. tests/cuda/spec_cuda.sh on bin/ (the pack of the first call lacked tests/mk_mtp_oracle);
# 2. the Qwen3-30B-A3B shape: all-GPU decode and decode with every expert in RAM, new, base and var in turns;
#    guild-cuda-prof --gpu-experts none (issue 17's GPU time a layer, CUPTI) of each;
# 3. cuda_attn_time --short (base, new, var in turns) and the timeline of new and var;
# 4. guild-cuda-prof --phases (all on the GPU) of each.
# Output under $OUT: s41b.log and s41b-files.tar.gz.
set -u
budget=${1:-400}
. bench/device/lib.sh # say, step, setup, finish, bin_of (base, var, new), decode_ab
setup s41b
V=$C/var
prof_of() { # SIDE: its guild-cuda-prof
    p=$(bin_of "$1")/guild-cuda-prof
    [ -x "$p" ] || p=$B/bench/guild-cuda-prof
    echo "$p"
}
step 90 "spec_cuda.sh" sh -c 'env GUILD_BUILDDIR="$0" sh tests/cuda/spec_cuda.sh > "'"$O"'/spec_cuda.txt" 2>&1; st=$?;
    tail -n 8 "'"$O"'/spec_cuda.txt"; exit $st' "$B"
m=/tmp/q30b.gguf
step 90 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s41b; exit 1; }
decode_ab gpu new base var new2 base2 var2
decode_ab ram new base var new2 base2 var2
for side in new base var; do
    step 40 "guild-cuda-prof --gpu-experts none ($side)" sh -c '"$0" "$@" > "'"$O"'/prof-'"$side"'.txt" 2>&1;
        st=$?; grep -E "step wall|GPU busy|^(attn_decode|rmsnorm_kernel<true, 2|router_cl|matmul_q)" \
        "'"$O"'/prof-'"$side"'.txt" | head -n 9; exit $st' "$(prof_of $side)" -m "$m" --steps 32 --threads 14 \
        --gpu-experts none
done
for side in base new var base new var; do
    t=$(bin_of $side)/tests/cuda/cuda_attn_time
    [ -x "$t" ] || t=$(bin_of $side)/cuda_attn_time
    step 25 "cuda_attn_time --short ($side)" sh -c '"$0" "$@" 2>&1 | tee -a "'"$O"'/time-'"$side"'.txt"' \
        "$t" --short 128 512 2048
done
step 30 "cuda_attn_time --timeline (new)" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/timeline-new.txt"' \
    "$B/tests/cuda/cuda_attn_time" --timeline 64 128 512 544 2048
step 30 "cuda_attn_time --timeline (var)" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/timeline-var.txt"' \
    "$V/cuda_attn_time" --timeline 64 128 512 544 2048
for side in new base var; do
    step 40 "guild-cuda-prof --phases ($side)" sh -c '"$0" "$@" > "'"$O"'/phases-'"$side"'.txt" 2>&1; st=$?;
        grep -E "layer 0|last layer" "'"$O"'/phases-'"$side"'.txt" | head -n 12; exit $st' \
        "$(prof_of $side)" -m "$m" --steps 32 --threads 14 --phases --no-trace
done
rm -f $m
finish s41b
