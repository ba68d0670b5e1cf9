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
#
#   bash bench/device/sessions.sh ab [SECONDS]
# is an A/B of a change against a baseline build in the same call: the pack also holds .carry/base/ (the
# baseline's guild and workers, as `repack.sh --final BUILD BASE_BUILD` leaves them) and, if built,
# bin/bench/guild-cuda-prof with libcupti. While the model is written: sessions_serve.py --long (prompts of
# 100-250 tokens at --batch 48, so that their chunks take the flash-attention kernel; logprobs compared) with the
# new build, then the baseline; then `guild bench sessions` multi-process at --gpu-mem 8G, the new build and the
# baseline (--gen 12); then guild-cuda-prof --sessions 1 and 8 with every expert on the GPU (what a batched step's
# kernels cost per session); then the new build at 1 and 16 sessions with the CPU workers spinning 500 us. Output:
# $OUT/sessions.log, and every other file in $OUT/ab.tar.xz (renewed after each step).
set -u
mode=one
if [ "${1:-}" = ab ]; then
    mode=ab
    shift
fi
budget=${1:-190}
C=${C:-$PWD/.carry-cudaseq}
P=/tmp/guild-cudaseq/.carry
mkdir -p /tmp/guild-cudaseq && tar -C /tmp/guild-cudaseq -xJf "$C/carry.tar.xz"
export LD_LIBRARY_PATH=$P/lib
B=$P/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$P/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$P/BASE_COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/sessions.log") 2>&1
OUT_DIR=$O
if [ $mode = ab ]; then # a call brings back a few files only: the others travel in one archive, renewed by save
    O=/tmp/guild-cudaseq/out
    mkdir -p "$O"
fi
save() { [ $mode = one ] || tar -cJf "$OUT_DIR/ab.tar.xz" -C "$O" . 2> /dev/null; }
t0=$(date +%s)
. bench/device/lib.sh # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit${mode/one/}${mode/ab/, baseline $base_commit}"
# the big model first, in the background, while the tests run (its pool fill takes the CPUs)
m=/tmp/q30b.gguf
(timeout -s KILL 90 "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 8 -q -o $m > "$O/mkmodel.log" 2>&1
    echo "rc=$?" >> "$O/mkmodel.log") &
mk=$!
[ $mode = one ] && step 50 check_cuda_seq "$B/tests/cuda/check_cuda_seq"

t=/tmp/guild-cudaseq/tiny.gguf
"$B/tools/guild-mkmodel" --arch qwen3moe --layers 2 --embd 128 --heads 2 --kv-heads 1 --head-dim 64 --experts 8 \
    --experts-used 2 --expert-ff 128 --ctx 512 --vocab 796 --type Q8_0 --seed 5 -q -o $t
serve() { # GUILD PORT PARALLEL LOG BATCH [FLAGS...]
    g=$1 port=$2 par=$3 log=$4 batch=$5
    shift 5
    "$g" serve -m $t --port "$port" --parallel "$par" --batch "$batch" --ctx 512 --backend cuda --cpu-workers 1 \
        --threads 2 "$@" > "$O/$log" 2>&1 &
}
serve_test() { # GUILD BATCH LOG-TAG [--long]
    # long prompts: no prefix reuse, whose shorter first chunk would differ between the two servers' histories
    extra=
    [ -n "${4:-}" ] && extra=--no-prefix-cache
    serve "$1" 18461 4 "serve-par$3.log" "$2" $extra
    p1=$!
    serve "$1" 18462 1 "serve-one$3.log" "$2" $extra
    p2=$!
    for i in $(seq 1 60); do
        curl -sf localhost:18461/health > /dev/null && curl -sf localhost:18462/health > /dev/null && break
        sleep 0.5
    done
    python3 bench/device/sessions_serve.py http://127.0.0.1:18461 http://127.0.0.1:18462 ${4:-}
    st=$?
    kill -TERM $p1 $p2
    wait $p1 $p2
    grep -h "sessions\|error\|refus" "$O/serve-par$3.log" | tail -n 12
    return $st
}
export B O t
export -f serve serve_test
sessions() { # GUILD TAG LIMIT [FLAGS...]
    g=$1 tag=$2 lim=$3
    shift 3
    step "$lim" "guild bench sessions ($tag), --gpu-mem 8G $*" "$g" bench sessions -m $m --gpu-mem 8G --threads 14 \
        --sessions 1,2,4,8,16 --prompt 128 --commit "$([ "$tag" = base ] && echo "$base_commit" || echo "$commit")" \
        --json "$O/sessions-$tag.json" "$@"
}
if [ $mode = ab ]; then
    step 20 "serve --parallel 4 = alone, long prompts (new)" bash -c "serve_test $B/guild 48 -new --long"
    step 20 "serve --parallel 4 = alone, long prompts (base)" bash -c "serve_test $P/base/guild 48 -base --long"
    save
    wait $mk
    cat "$O/mkmodel.log"
    if [ -f $m ]; then
        sessions "$B/guild" new 36 --gen 12
        save
        sessions "$P/base/guild" base 36 --gen 12
        save
        if [ -x "$B/bench/guild-cuda-prof" ]; then
            for n in 8 1; do
                step 18 "guild-cuda-prof all on the GPU, $n session(s)" sh -c '"$0" "$@" > "'"$O/prof-s$n.txt"'"; st=$?; cat "'"$O/prof-s$n.txt"'"; exit $st' \
                    "$B/bench/guild-cuda-prof" -m $m --sessions $n --populate 64 --steps 6 --threads 14
                save
            done
        fi
        # the CPU workers sleep after 50 us without an exchange: a decode step's dense part between two layers is
        # longer, so each exchange may start with a wake-up
        sessions "$B/guild" new-spin500 20 --gen 8 --sessions 1,16 --spin-us 500
    fi
    save
    say "done"
    exit 0
fi
step 40 "guild serve --parallel 4 --backend cuda (pipeline) vs --parallel 1" bash -c "serve_test $B/guild 16 ''"

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
