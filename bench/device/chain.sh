#!/usr/bin/env bash
# guild-cuda-chain-bench on the device (issue 17): what a decode step's chain of dependent phases costs as kernels,
# with programmatic dependent launch, and as persistent kernels with grid barriers. From the repo root with the
# binary at $C/guild-cuda-chain-bench (and libcudart beside it in $C/lib):
#   C=DIR bash bench/device/chain.sh [SECONDS]
# Output: $OUT/chain.log (every configuration's table).
set -u
budget=${1:-100}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
P=$C/guild-cuda-chain-bench
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
exec > >(tee -a "$O/chain.log") 2>&1
t0=$(date +%s)
. "$(dirname "$0")/lib.sh" # say, step
say "chain: commit $(cat "$C/COMMIT" 2> /dev/null || echo unknown); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
# the decode step's shape: 48 layers x 10 phases, the resident grid (every SM full), then one block an SM
step 40 "10 phases a layer, resident grid" "$P" --layers 48 --phases 10 --kib 0,64,256,1024,4096,16384 --reps 15
step 30 "10 phases a layer, 132 blocks of 512" "$P" --layers 48 --phases 10 --kib 0,64,256,1024,4096 --reps 15 \
    --threads 512 --blocks 132
step 30 "10 phases a layer, 32 blocks of 256" "$P" --layers 48 --phases 10 --kib 0,64,256,1024 --reps 15 \
    --threads 256 --blocks 32
step 30 "4 phases a layer, resident grid" "$P" --layers 48 --phases 4 --kib 0,1024,4096 --reps 15
say "chain done"
