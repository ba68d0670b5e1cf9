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
t0=$(date +%s)
. bench/device/lib.sh
R=${OUT:-/tmp/guild-out}
mkdir -p "$R" /tmp/pk
exec > >(tee -a "$R/s52f.log") 2>&1
tar -xJf .carry-s52f/p.tar.xz -C /tmp/pk && ln -sfn /tmp/pk/E/lib /tmp/pk/C/lib
say "s52f: new $(cat /tmp/pk/E/COMMIT), old $(cat /tmp/pk/C/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
for side in new old new2 old2; do
    c=/tmp/pk/E
    case $side in old*) c=/tmp/pk/C ;; esac
    for t in clock:check_cuda_clock: backend:check_cuda_fused:backend greedy:check_cuda_backend:greedy; do
        name=${t%%:*} rest=${t#*:} prog=${rest%%:*} tc=${rest#*:}
        step 40 "$prog $tc ($side)" env LD_LIBRARY_PATH=$c/lib CK_DEFAULT_TIMEOUT=60 ${tc:+CK_RUN_CASE=$tc} \
            sh -c '"$0" > "$1" 2>&1; st=$?; grep -E "Checks|:F:" "$1" | head -n 4 | cut -c1-200; exit $st' \
            "$c/bin/tests/cuda/$prog" "$R/$name-$side.log"
    done
done
say "s52f done"
