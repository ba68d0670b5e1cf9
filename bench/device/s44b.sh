#!/usr/bin/env bash
# Session 44's second call: one-token products staged in shared memory (cuda_set_matmul_stage) and the fused norm's
# cluster form (cuda_set_norm_cluster), the defaults, against --cuda-off mm-stage,norm-cluster in the same build
# (and each off alone in the profile). Pack in $C (bench/device/pack-xz.sh, default files):
#   C=/tmp/c bash bench/device/s44b.sh [SECONDS]
# 1. bench/device/alltests.sh, three programs at a time (the products' bit tests run the staged form);
# 2. guild-cuda-prof --gpu-experts none on the qwen3-30b-a3b shape, both on and both off in turns (twice), then each
#    off alone;
# 3. all-GPU and experts-in-RAM decode at 512 positions, both on and both off, in turns;
# 4. cuda_head_time --timeline 1 4 16 (the router's phases: its last block now writes the normed row);
# 5. whether Nsight Compute is on the machine, and if so the router's cluster kernel's stall reasons.
# Output under $OUT: s44b.log, alltests.log and s44b-files.tar.gz.
set -u
budget=${1:-560}
bash bench/device/alltests.sh 200 0 3 > /dev/null 2>&1
. bench/device/lib.sh # say, step, setup, finish
setup s44b
grep -E "rc=|Checks|FAIL|tests done" "$R/alltests.log" | tail -n 40
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
off() {
    case $1 in
    off*) echo "--cuda-off mm-stage,norm-cluster" ;;
    nostage) echo "--cuda-off mm-stage" ;;
    nonorm) echo "--cuda-off norm-cluster" ;;
    esac
}
for side in new off new2 off2 nostage nonorm; do
    # shellcheck disable=SC2046 # off: two words or none
    step 40 "guild-cuda-prof --gpu-experts none ($side)" sh -c '"$0" "$@" > "'"$O"'/prof-'"$side"'.txt" 2>&1;
        st=$?; grep -E "step wall|GPU busy|matmul|router_cl|attn_decode|rmsnorm_|qk_prep" "'"$O"'/prof-'"$side"'.txt" | head -n 12; exit $st' \
        "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --gpu-experts none $(off $side)
done
for side in new off new2 off2; do
    # shellcheck disable=SC2046
    step 20 "all-GPU decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$B/guild" bench run -m "$m" --populate 512 --runs 3 --gen 64 --json "$O/gpu-$side.json" $(off $side)
done
for side in new off new2 off2; do
    # shellcheck disable=SC2046
    step 35 "experts in RAM decode ($side)" sh -c '"$0" "$@" 2>&1 | grep -E "run [0-9]:|^ +512 " | tail -n 4' \
        "$B/guild" bench run -m "$m" --populate 512 --runs 3 --gen 48 --gpu-experts none --json "$O/ram-$side.json" \
        $(off $side)
done
step 30 "cuda_head_time --timeline" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/head-tl.txt" | grep -E "^(timeline|head)"' \
    "$B/tests/cuda/cuda_head_time" --timeline 1 4 16
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2> /dev/null | head -n 1)
say "ncu: ${ncu:-none}"
if [ -n "$ncu" ]; then
    step 90 "ncu router_cluster_kernel" sh -c '"$0" "$@" > "'"$O"'/ncu-router.txt" 2>&1; st=$?; tail -n 60 "'"$O"'/ncu-router.txt"; exit $st' \
        "$ncu" --kernel-name regex:router_cluster --launch-skip 20 --launch-count 1 \
        --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy \
        "$B/tests/cuda/cuda_head_time" 1
    step 120 "ncu decode kernels" sh -c '"$0" "$@" > "'"$O"'/ncu-decode.txt" 2>&1; st=$?; grep -E "^  [a-z_]+.*\(|Duration|Stall|stall|Warp Cycles|Issued Warp|Registers|Achieved Occ" "'"$O"'/ncu-decode.txt" | head -n 120; exit $st' \
        "$ncu" --kernel-name "regex:rmsnorm_cl_kernel|matmul_q_multi|attn_decode_cl|qk_prepare|matmul_q_kernel" \
        --launch-skip 400 --launch-count 6 --section WarpStateStats --section LaunchStats --section Occupancy \
        --section SpeedOfLight "$B/guild" bench run --single-process -m "$m" --populate 512 --runs 1 --gen 8 \
        --gpu-experts none
fi
rm -f $m
finish s44b
