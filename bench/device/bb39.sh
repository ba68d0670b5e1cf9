#!/usr/bin/env bash
# main 3041e9c's check_cuda_backend (greedy cases) against this pack's, on the device: is the q4_1/q5_1 F32-cache miss main's?
set -u
budget=${1:-90}
. bench/device/lib.sh
setup bb39
xz -dc .carry-lead/base_backend.xz > /tmp/base_backend && chmod +x /tmp/base_backend
for side in base new; do
    bin=$B/tests/cuda/check_cuda_backend
    [ $side = base ] && bin=/tmp/base_backend
    step 40 "check_cuda_backend greedy ($side)" sh -c 'CK_RUN_CASE=greedy "$0" > "'"$O"'/backend-'"$side"'.txt" 2>&1; st=$?;
        grep -E "q4_1|q5_1|Checks|:F:" "'"$O"'/backend-'"$side"'.txt" | head -n 12; exit $st' "$bin"
done
finish bb39
