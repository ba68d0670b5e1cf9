#!/usr/bin/env bash
# mla's device call: the MLA kernel and backend checks, then guild bench run on a DeepSeek-V3 shape (5 layers)
set -u
C=/tmp/c
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
O=${OUT:-/tmp/o}
mkdir -p "$O"
exec > >(tee -a "$O/mla.log") 2>&1
t0=$(date +%s)
say() { echo "== $(date -u +%H:%M:%S) +$(($(date +%s) - t0))s $*"; }
say "commit $(cat $C/COMMIT); $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader); $(nproc) CPUs"
m=/tmp/ds.gguf
(timeout -s KILL 70 "$B/tools/guild-mkmodel" --shape deepseek-v3 --layers 5 --fill pool --threads 12 -q -o $m > "$O/mkmodel.log" 2>&1
 echo "rc=$? mkmodel" >> "$O/mkmodel.log") &
mk=$!
export CK_DEFAULT_TIMEOUT=120
say "check_cuda_kernels mla_attention"
CK_RUN_CASE=mla_attention timeout -s KILL 45 "$B/tests/cuda/check_cuda_kernels"
echo "rc=$? (check_cuda_kernels mla_attention)"
say "check_cuda_backend reruns"
CK_RUN_CASE=reruns timeout -s KILL 45 "$B/tests/cuda/check_cuda_backend"
echo "rc=$? (check_cuda_backend reruns)"
wait $mk
cat "$O/mkmodel.log"
say "model $(du -h $m 2>/dev/null | cut -f1)"
timeout -s KILL 100 "$B/guild" bench run -m $m --populate 512,4096 --gen 32 --runs 2 --threads 14 --batch 4096 \
    --gpu-mem 24G -v --commit "$(cat $C/COMMIT)" --json "$O/ds-24g.json" 2>&1 |
    grep -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker"
echo "rc=${PIPESTATUS[0]} (bench run)"
say done
