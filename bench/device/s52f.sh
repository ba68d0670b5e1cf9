#!/usr/bin/env bash
# Session 52's sixth call: call 5's tests failed on main's head f019843 (quantized models of every architecture but
# gpt-oss, the dense llama too, whose kernels the head does not change; logits of two identical runs differ in
# check_cuda_clock), where call 3's pack f7f69dc (the same but for the experts' gate/up trigger) had passed. Both packs
# again, in turns: check_cuda_clock, check_cuda_fused's backend cases, check_cuda_backend's greedy cases.
#   here:   the three test programs of each pack and one lib/ (they are the same libraries), as .carry-s52f/p.tar.xz
#           (E: .carry-s52e's, C: .carry-s52c's)
#   device: bash bench/device/s52f.sh [SECONDS] (with .carry-s52f carried)
set -u
budget=${1:-200}
. bench/device/lib.sh
mkdir -p /tmp/pk && tar -xJf .carry-s52f/p.tar.xz -C /tmp/pk && ln -sfn /tmp/pk/E/lib /tmp/pk/C/lib
C=/tmp/pk/E setup s52f
say "s52f: new $(cat /tmp/pk/E/COMMIT), old $(cat /tmp/pk/C/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
for side in new old new2 old2; do
    c=/tmp/pk/E
    case $side in old*) c=/tmp/pk/C ;; esac
    pack_test 40 "$side" "$c" check_cuda_clock "" "$R/clock-$side.log"
    pack_test 40 "$side" "$c" check_cuda_fused backend "$R/backend-$side.log"
    pack_test 40 "$side" "$c" check_cuda_backend greedy "$R/greedy-$side.log"
done
say "s52f done"
