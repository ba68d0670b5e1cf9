#!/usr/bin/env bash
# 61930bb's check_cuda_backend (main + the attention timeline only) greedy cases on the device
set -u
budget=${1:-60}
. bench/device/lib.sh
setup tl39
xz -dc .carry-lead/tl_backend.xz > /tmp/tl_backend && chmod +x /tmp/tl_backend
step 40 "check_cuda_backend greedy (61930bb: timeline only)" sh -c 'CK_RUN_CASE=greedy "$0" > "'"$O"'/backend-tl.txt" 2>&1; st=$?;
    grep -E "q4_1|q5_1|Checks|:F:" "'"$O"'/backend-tl.txt" | head -n 12; exit $st' /tmp/tl_backend
finish tl39
