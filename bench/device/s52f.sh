#!/usr/bin/env bash
# Session 52's sixth call: call 5's tests failed on main's head f019843 (quantized models of every architecture but
# gpt-oss, the dense llama too, whose kernels the head does not change; logits of two identical runs differ in
# check_cuda_clock), where call 3's pack f7f69dc (the same but for the experts' gate/up trigger) had passed. Both packs
# again, in turns: check_cuda_clock, check_cuda_fused's backend cases, check_cuda_backend's greedy cases.
#   device: bash bench/device/s52f.sh [SECONDS] (with .carry-s52e and .carry-s52c carried)
set -u
budget=${1:-200}
t0=$(date +%s)
. bench/device/lib.sh
R=${OUT:-/tmp/guild-out}
mkdir -p "$R" /tmp/cE /tmp/cC
exec > >(tee -a "$R/s52f.log") 2>&1
tar -xJf .carry-s52e/c.tar.xz -C /tmp/cE && tar -xJf .carry-s52c/c.tar.xz -C /tmp/cC
say "s52f: new $(cat /tmp/cE/COMMIT), old $(cat /tmp/cC/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
for side in new old new2 old2; do
    c=/tmp/cE
    case $side in old*) c=/tmp/cC ;; esac
    for t in clock:check_cuda_clock: backend:check_cuda_fused:backend greedy:check_cuda_backend:greedy; do
        name=${t%%:*} rest=${t#*:} prog=${rest%%:*} tc=${rest#*:}
        step 40 "$prog $tc ($side)" env LD_LIBRARY_PATH=$c/lib CK_DEFAULT_TIMEOUT=60 ${tc:+CK_RUN_CASE=$tc} \
            sh -c '"$0" > "$1" 2>&1; st=$?; grep -E "Checks|:F:" "$1" | head -n 4 | cut -c1-200; exit $st' \
            "$c/bin/tests/cuda/$prog" "$R/$name-$side.log"
    done
done
say "s52f done"
