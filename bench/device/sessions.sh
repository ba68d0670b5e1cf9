#!/usr/bin/env bash
# Issue 18's CUDA multi-sequence piece on the device in one call: tests/cuda/check_cuda_seq (N sequences decoded
# together = each alone, bit for bit), guild serve --parallel 4 --backend cuda end to end on the multi-process
# pipeline (CUDA dense + one CPU expert worker; bench/device/sessions_serve.py: 8 concurrent greedy completions =
# the same one at a time on a --parallel 1 server, overlapping), then `guild bench sessions` on a
# Qwen3-30B-A3B-shaped model by guild-mkmodel: aggregate decode tok/s of 1, 2, 4, 8, 16 sessions with the
# experts in RAM at --gpu-mem 8G, multi-process (the pipeline guild serve runs), then single-process if the budget
# allows. Run from the repo root:
#   bash bench/device/sessions.sh [SECONDS]
# with the pack (repack.sh BUILD_DIR, then `tar -cJf carry.tar.xz .carry`) in $C/carry.tar.xz (default
# .carry-cudaseq). Every step runs under `timeout -s KILL`; output: $OUT/*.log, $OUT/*.json.
set -u
budget=${1:-190}
C=${C:-$PWD/.carry-cudaseq}
P=/tmp/guild-cudaseq/.carry
mkdir -p /tmp/guild-cudaseq && tar -C /tmp/guild-cudaseq -xJf "$C/carry.tar.xz"
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/sessions.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit"
# the big model first, in the background, while the tests run (its pool fill takes the CPUs)
m=/tmp/q30b.gguf
(timeout -s KILL 90 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 8 -q -o $m > "$O/mkmodel.log" 2>&1
    echo "rc=$?" >> "$O/mkmodel.log") &
mk=$!
step 50 check_cuda_seq "$B/tests/cuda/check_cuda_seq"

t=/tmp/guild-cudaseq/tiny.gguf
"$B/tools/guild-mkmodel" --arch qwen3moe --layers 2 --embd 128 --heads 2 --kv-heads 1 --head-dim 64 --experts 8 \
    --experts-used 2 --expert-ff 128 --ctx 512 --vocab 796 --type Q8_0 --seed 5 -q -o $t
serve() { # PORT PARALLEL LOG
    "$B/guild" serve -m $t --port "$1" --parallel "$2" --batch 16 --backend cuda --cpu-workers 1 --threads 2 \
        > "$O/$3" 2>&1 &
}
serve_test() {
    serve 18461 4 serve-par.log
    p1=$!
    serve 18462 1 serve-one.log
    p2=$!
    for i in $(seq 1 60); do
        curl -sf localhost:18461/health > /dev/null && curl -sf localhost:18462/health > /dev/null && break
        sleep 0.5
    done
    python3 bench/device/sessions_serve.py http://127.0.0.1:18461 http://127.0.0.1:18462
    st=$?
    kill -TERM $p1 $p2
    wait $p1 $p2
    grep -h "sessions\|error\|refus" "$O/serve-par.log" | tail -n 12
    return $st
}
export B O t
export -f serve serve_test
step 40 "guild serve --parallel 4 --backend cuda (pipeline) vs --parallel 1" bash -c serve_test

wait $mk
cat "$O/mkmodel.log"
if [ -f $m ]; then
    step 75 "guild bench sessions, multi-process, --gpu-mem 8G" "$B/guild" bench sessions -m $m --gpu-mem 8G \
        --threads 14 --sessions 1,2,4,8,16 --prompt 128 --gen 32 --commit "$commit" --json "$O/sessions-mp.json"
    step 60 "guild bench sessions, single process, --gpu-mem 8G" "$B/guild" bench sessions -m $m --gpu-mem 8G \
        --threads 14 --single-process --sessions 1,2,4,8,16 --prompt 128 --gen 32 --commit "$commit" \
        --json "$O/sessions-sp.json"
fi
say "done"
