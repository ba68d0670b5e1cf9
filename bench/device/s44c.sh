#!/usr/bin/env bash
# Session 44's third call: the build with the fused norm's cluster form, the router's normed row written by its last
# block and its softmax in registers (new, $C/bin) against session 44's first build (base: main 96e7b48 + the router
# timeline, 4629d7b, in $C/base: guild, the workers, guild-cuda-prof), in turns. Pack in $C
# (bench/device/pack-xz.sh, default files, with /tmp/p40/base):
#   C=/tmp/c bash bench/device/s44c.sh [SECONDS]
# 1. bench/device/alltests.sh, three programs at a time;
# 2. guild-cuda-prof --gpu-experts none on the qwen3-30b-a3b shape: base, new, base2, new2, then new with
#    --cuda-off norm-cluster;
# 3. cuda_head_time --timeline 1 4 16 (the router's phases);
# 4. all-GPU and experts-in-RAM decode at 512 positions, base and new in turns;
# 5. Nsight Compute on the decode step's kernels with warm caches and the clocks left alone (each kernel alone:
#    its time without the step's overlap).
# Output under $OUT: s44c.log, alltests.log and s44c-files.tar.gz.
set -u
budget=${1:-500}
bash bench/device/alltests.sh 200 0 3 > /dev/null 2>&1
. bench/device/lib.sh # say, step, setup, finish, prof_ab, decode_ab
setup s44c
grep -E "rc=|Checks|FAIL|tests done" "$R/alltests.log" | tail -n 40
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
prof_ab base new base2 new2
step 40 "guild-cuda-prof --gpu-experts none (new, --cuda-off norm-cluster)" sh -c '"$0" "$@" > "'"$O"'/prof-nonorm.txt" 2>&1;
    st=$?; grep -E "step wall|GPU busy|rmsnorm" "'"$O"'/prof-nonorm.txt" | head -n 5; exit $st' \
    "$B/bench/guild-cuda-prof" -m "$m" --steps 32 --threads 14 --gpu-experts none --cuda-off norm-cluster
for side in base new base2 new2; do
    echo "-- $side"
    grep -E "^(router|matmul|attn|rmsnorm|qk_prep)" "$O/prof-$side.txt" | head -n 9
done
step 30 "cuda_head_time --timeline" sh -c '"$0" "$@" 2>&1 | tee "'"$O"'/head-tl.txt" | grep -E "^(timeline|head)"' \
    "$B/tests/cuda/cuda_head_time" --timeline 1 4 16
decode_ab gpu base new base2 new2
decode_ab ram base new base2 new2
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2> /dev/null | head -n 1)
[ -n "$ncu" ] && step 120 "ncu decode kernels, warm caches" sh -c '"$0" "$@" > "'"$O"'/ncu-warm.txt" 2>&1; st=$?;
    grep -E "^  [a-z_]+.*\(|Duration|Warp Cycles Per Issued|Achieved Occ|stalled" "'"$O"'/ncu-warm.txt" | head -n 80; exit $st' \
    "$ncu" --cache-control none --clock-control none \
    --kernel-name "regex:rmsnorm_cl_kernel|matmul_q_multi|attn_decode_cl|qk_prepare|matmul_q_kernel|router_cluster" \
    --launch-skip 400 --launch-count 7 --section WarpStateStats --section LaunchStats --section Occupancy \
    --section SpeedOfLight --section MemoryWorkloadAnalysis "$B/guild" bench run --single-process -m "$m" \
    --populate 512 --runs 1 --gen 8 --gpu-experts none
rm -f $m
finish s44c
