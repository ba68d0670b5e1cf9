#!/usr/bin/env bash
# Issue 14's device session (streamed experts, one copy in RAM) in one call within a device-time budget. Run from
# the repo root with the pack in $C (default .carry-stream: bin/, lib/, base/ with the baseline's guild and
# workers, COMMIT, BASE_COMMIT, this script and lib.sh):
#   bash $C/stream.sh check [SECONDS]   the CUDA tests (kernels, backend, mkmodel_greedy.sh), then a first look:
#                                       the Qwen3-30B-A3B shape at --gpu-mem 8G, one run of each mode
#   bash $C/stream.sh final [SECONDS]   baseline vs this build, medians of 3: the Qwen3-30B-A3B shape at a tight
#                                       budget and at 8G (and with a routing profile), then the Qwen3-235B-A22B
#                                       shape (30 layers) at a tight budget (its dense part + 1.5 GiB) and 24G
#   bash $C/stream.sh ring [SECONDS]    the staging ring (session 22): this build vs the baseline, medians of 3, the
#                                       Qwen3-30B-A3B shape at 3.9G and 8G, then 8G with at most 12 resident
#                                       layers (room for a deeper ring); check_cuda_backend first
#   bash $C/stream.sh prof [SECONDS]    where a streamed prefill's time goes (session 23): the unpacking's test and
#                                       timing (cuda_bench --unpack), the Qwen3-30B-A3B shape at 3.9G: a 4096-token
#                                       prefill traced by guild-cuda-prof --trace-prefill (one process), then this
#                                       build (its per-pass breakdown in the GPU worker's log) vs the baseline
#   bash $C/stream.sh ab [SECONDS]      check_cuda_backend, the 30B shape at 8G this build vs the baseline, 8G with a
#                                       recorded routing profile, then the Qwen3-235B-A22B shape (30 layers) at a
#                                       tight budget and at 24G (~300 s: more than session 23 had)
#   bash $C/stream.sh 8g [SECONDS]      session 23's last call: check_cuda_backend's streaming cases
#                                       (graphs_experts_arena), then the 30B shape at 8G, this build
#   bash $C/stream.sh profile [SECONDS] decode at 8G with a routing profile (~70 s): the 30B shape, a profile
#                                       recorded by the pipeline on a text prompt (guild run --record-routing; its
#                                       decode and hit rate: whole layers), the same prompt with it (in-sample) and
#                                       guild bench run with it (the bench's prompt: out of sample); REUSE=1 takes
#                                       a model already at /tmp/q30b.gguf, KEEP=1 leaves it there (the profile is
#                                       removed either way)
#   bash $C/stream.sh s24 [SECONDS]     session 24's one call: the unpacking's test and timing (this build and
#                                       the baseline's cuda_bench), the streaming cases of check_cuda_backend, the
#                                       30B shape at 8G (4096) this build vs the baseline, a routing profile
#                                       recorded by the pipeline at 8G (guild run --record-routing on a text
#                                       prompt) and 8G decode with it, then the Qwen3-235B-A22B shape (30 layers)
#                                       at a tight budget and at 24G
#   bash $C/stream.sh kern [SECONDS]    the staged expert kernels: check_cuda_expert_mma of this build (bits, the
#                                       Qwen3-30B-A3B and Qwen3-235B-A22B layers' timings, dense timings), then the
#                                       baseline's program (base/check_cuda_expert_mma: the same test source on the
#                                       baseline's kernels), its timings only
#   bash $C/stream.sh s25 [SECONDS]     session 25's one call: check_cuda_expert_mma of this build, the
#                                       Qwen3-235B-A22B shape (30 layers) at the tight budget (its dense part at
#                                       batches of 4096 + 1.5 GiB), this build then the baseline, medians of 3
#                                       ($RUNS), then the baseline's kernel timings as in kern
#   bash $C/stream.sh s25b [SECONDS]    session 25's second call: the Qwen3-235B-A22B shape at the tight budget,
#                                       this build alone (its plan, then the bench, medians of 3)
#   bash $C/stream.sh s26 [SECONDS]     session 26's one call (Q6_K rows of an odd count of blocks in the staged
#                                       kernel): the Qwen3-30B-A3B shape written while check_cuda_expert_mma's bits,
#                                       check_cuda_fused and check_cuda_kernels run side by side (correctness
#                                       only), then that shape at --gpu-mem 8G (4096 tokens, --gen 16, medians of
#                                       3) this build then the baseline, then check_cuda_expert_mma's timing alone
#   bash $C/stream.sh dec235 [SECONDS] issue 14's last open question: the Qwen3-235B-A22B shape (30 layers) at the
#                                       tight budget (every expert in RAM, streamed prefill) beside `--gpu-experts
#                                       none` (the whole GPU, no expert resident), this build and the baseline,
#                                       populated 512 and 4096, medians of 3: is decode at the tight budget the
#                                       decode of every expert in RAM, and is it unchanged against the baseline
# Every step runs under `timeout -s KILL` and is skipped when it would not fit. Output: $OUT/*.log and JSON.
set -u
mode=${1:-check}
budget=${2:-400}
C=${C:-$PWD/.carry-stream}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=${BASE:-/tmp/guild-base} # or the pack's base/ (repack.sh --final)
if [ -f "$C/base.tgz" ]; then # the baseline's guild and workers, packed small
    mkdir -p $BASE && tar -C $BASE -xzf "$C/base.tgz"
fi
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
exec > >(tee -a "$O/$mode.log") 2>&1
t0=$(date +%s)
. "$C/lib.sh" # say, step
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit"
say "cpu flags: $(grep -o -w 'avx512_vnni\|amx_int8\|avx512_vbmi\|gfni' /proc/cpuinfo | sort -u | tr '\n' ' ');" \
    "shmem THP: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled); memlock: $(ulimit -l); /tmp: $(df -h /tmp | tail -1)"

m30=/tmp/q30b.gguf
m235=/tmp/q235b-30l.gguf
bench() { # LIMIT NAME BIN COMMIT MODEL POPULATE RUNS FLAGS...
    lim=$1 name=$2 bin=$3 c=$4 mdl=$5 pop=$6 runs=$7
    shift 7
    step "$lim" "bench run $name: $*" sh -c '"$0" "$@" 2>&1 | grep -v "^guild: info: \(cpu\|gpu\)-worker\|^gpu-worker: info: \(ready\|request\)\|^cpu-worker"' \
        "$bin/guild" bench run -m "$mdl" --populate "$pop" --gen "${GEN:-64}" --runs "$runs" --threads 14 --batch 4096 -v \
        --commit "$c" --json "$O/$name.json" "$@"
}
plan() { # NAME MODEL FLAGS...
    name=$1 mdl=$2
    shift 2
    step 20 "guild plan $name: $*" sh -c '"$0" "$@" > "'"$O"'/plan-'"$name"'.txt" 2>&1; st=$?; cat "'"$O"'/plan-'"$name"'.txt"; exit $st' \
        "$B/guild" plan -m "$mdl" --backend cuda --batch 4096 --ctx 4160 "$@"
}

# REUSE=1: a model already at $m30 (written by the calling script in this call) is kept, not written again
mk30() {
    if [ "${REUSE:-0}" = 1 ] && [ -f $m30 ]; then
        say "model: $m30 as the caller wrote it"
        return 0
    fi
    step 60 "model: Qwen3-30B-A3B shape, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
        --threads "$(nproc)" -q -o $m30
}
# a text prompt of ~3,000 tokens for the routing profile (guild-mkmodel's vocabulary: ~55 a sentence; 120
# sentences, 6,625 tokens, were more than run30's --ctx 4160)
prompt() { for i in $(seq 1 55); do printf 'The quick brown fox %d jumps over the lazy dog while the committee reviews chapter %d of the report. ' $i $i; done > /tmp/prompt.txt; }
run30() { # NAME FLAGS...: guild run of the 30B shape at 8G on /tmp/prompt.txt, 64 tokens, --stats
    n=$1
    shift
    # (sh -c: $0 the guild, $1 the model, the flags after it)
    step 25 "guild run $n: $*" sh -c 'g=$0 m=$1; shift; "$g" run -m "$m" -f /tmp/prompt.txt -n 64 --temp 0 \
        --threads 14 --ctx 4160 --batch 4096 --backend cuda --gpu-mem 8G --stats "$@" \
        2> "'"$O"'/run-'"$n"'.txt" > /dev/null; st=$?; \
        grep -i "hit rate\|tok/s\|streamed\|routing\|error" "'"$O"'/run-'"$n"'.txt"; exit $st' "$B/guild" $m30 "$@"
}

# the Qwen3-235B-A22B shape (30 layers) at $m235 and its tight budget in $tight235; fails when no model was written.
# The tight budget: the dense part the plan's refusal of 1G names + 1.5 GiB (its buffers at the smallest chunk, since
# the buffers follow the batch used: 2.97 + 1.5 = 4.5G in session 31, where 2048-token chunks fit; sessions 25-26
# read 3.9 GiB there, at batches of 4096, and ran 5.4-5.5G)
mk235() {
    step 90 "model: Qwen3-235B-A22B shape, 30 layers, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-235b-a22b \
        --layers 30 --fill pool --threads "$(nproc)" -q -o $m235
    [ -f $m235 ] || return 1
    dense=$("$B/guild" plan -m $m235 --backend cuda --batch 4096 --ctx 4160 --gpu-mem 1G 2>&1 |
        sed -n 's/.*the dense part needs \([0-9.]*\) GiB.*/\1/p' | head -1)
    tight235=$(awk -v d="${dense:-3}" 'BEGIN { printf "%.1fG", d + 1.5 }')
    say "235B shape: dense part ${dense:-unknown} GiB, tight budget $tight235"
}
# decode at 8G with a routing profile: recorded by the pipeline's GPU worker (every layer's routing is on the device)
# on the text prompt (whole layers resident: its decode and hit rate), then that prompt again with the profile
# (in-sample: the best case) and the bench's prompt with it (ids drawn over the whole vocabulary: out of sample)
profile30() {
    run30 8g-record --record-routing $m30.routing
    if [ -f $m30.routing ]; then
        cp $m30.routing "$O/q30b.gguf.routing"
        plan 8g-profile $m30 --gpu-mem 8G --routing $m30.routing
        run30 8g-profile --routing $m30.routing
        bench 25 q30-8g-profile "$B" "$commit" $m30 512 3 --gpu-mem 8G --routing $m30.routing
    fi
}
if [ "$mode" = check ]; then
    [ "${KERNELS:-0}" = 1 ] && step 60 check_cuda_kernels "$B/tests/cuda/check_cuda_kernels"
    step 120 check_cuda_backend "$B/tests/cuda/check_cuda_backend"
    step 150 mkmodel_greedy.sh env GUILD_BUILDDIR="$B" sh "$C/mkmodel_greedy.sh"
    mk30
    if [ -f $m30 ]; then
        plan tight $m30 --gpu-mem 3.9G
        plan 8g $m30 --gpu-mem 8G
        bench 90 q30-tight-multi "$B" "$commit" $m30 512,4096 1 --gpu-mem 3.9G
        bench 90 q30-8g-multi "$B" "$commit" $m30 512,4096 1 --gpu-mem 8G
    fi
fi
if [ "$mode" = final ]; then
    mk30
    if [ -f $m30 ]; then
        plan tight $m30 --gpu-mem 3.9G
        plan 8g $m30 --gpu-mem 8G
        plan tight-ge1 $m30 --gpu-mem 3.9G --gpu-experts 1
        bench 50 q30-tight "$B" "$commit" $m30 512,4096 3 --gpu-mem 3.9G
        [ -x "$BASE/guild" ] && bench 75 q30-tight-base "$BASE" "$base_commit" $m30 512,4096 3 --gpu-mem 3.9G
        bench 50 q30-8g "$B" "$commit" $m30 512,4096 3 --gpu-mem 8G
        [ -x "$BASE/guild" ] && bench 60 q30-8g-base "$BASE" "$base_commit" $m30 512,4096 3 --gpu-mem 8G
        prompt
        # the profile from the CPU backend in one process (its executor sees every layer's routing); later runs
        # find it beside the model (MODEL.gguf.routing)
        step 45 "routing profile of the 30B shape" sh -c '"$0" run -m "$1" -f /tmp/prompt.txt -n 16 --temp 0 \
            --threads 14 --ctx 8192 --backend cpu --single-process --record-routing "$1.routing" > /dev/null' "$B/guild" $m30
        plan 8g-profile $m30 --gpu-mem 8G --routing $m30.routing
        [ -f $m30.routing ] && bench 50 q30-8g-profile "$B" "$commit" $m30 512,4096 3 --gpu-mem 8G --routing $m30.routing
        rm -f $m30 $m30.routing
    fi
    if mk235; then
        plan 235-tight $m235 --gpu-mem "$tight235"
        bench 60 q235-tight "$B" "$commit" $m235 4096 3 --gpu-mem "$tight235"
        plan 24g $m235 --gpu-mem 24G
        bench 80 q235-24g "$B" "$commit" $m235 4096 3 --gpu-mem 24G
        [ -x "$BASE/guild" ] && bench 80 q235-24g-base "$BASE" "$base_commit" $m235 4096 1 --gpu-mem 24G
    fi
fi
if [ "$mode" = ring ]; then
    step 45 check_cuda_backend "$B/tests/cuda/check_cuda_backend"
    mk30
    if [ -f $m30 ]; then
        plan tight $m30 --gpu-mem 3.9G
        plan 8g $m30 --gpu-mem 8G
        bench 40 q30-tight "$B" "$commit" $m30 512,4096 3 --gpu-mem 3.9G
        [ -x "$BASE/guild" ] && bench 40 q30-tight-base "$BASE" "$base_commit" $m30 512,4096 3 --gpu-mem 3.9G
        bench 40 q30-8g "$B" "$commit" $m30 512,4096 3 --gpu-mem 8G
        [ -x "$BASE/guild" ] && bench 40 q30-8g-base "$BASE" "$base_commit" $m30 512,4096 3 --gpu-mem 8G
        bench 35 q30-8g-ge12 "$B" "$commit" $m30 4096 3 --gpu-mem 8G --gpu-experts 12
    fi
fi
if [ "$mode" = prof ]; then
    step 40 "check_cuda_kernels expert_unpack" env CK_RUN_CASE=expert_unpack "$B/tests/cuda/check_cuda_kernels"
    step 20 "cuda_bench --unpack" "$B/tests/cuda/cuda_bench" --unpack
    mk30
    if [ -f $m30 ]; then
        plan tight $m30 --gpu-mem 3.9G
        bench 45 q30-tight "$B" "$commit" $m30 512,4096 3 --gpu-mem 3.9G
        [ -x "$BASE/guild" ] && bench 45 q30-tight-base "$BASE" "$base_commit" $m30 512,4096 3 --gpu-mem 3.9G
        step 45 "guild-cuda-prof --trace-prefill at 3.9G" sh -c '"$0" "$@" > "'"$O"'/prof-prefill-tight.txt"; st=$?; \
            cat "'"$O"'/prof-prefill-tight.txt"; exit $st' "$B/bench/guild-cuda-prof" -m $m30 --populate 4096 \
            --batch 4096 --trace-prefill --threads 14 --gpu-mem 3.9G
    fi
fi
if [ "$mode" = 8g ]; then
    step 40 "check_cuda_backend graphs_experts_arena" env CK_RUN_CASE=graphs_experts_arena \
        "$B/tests/cuda/check_cuda_backend"
    mk30
    if [ -f $m30 ]; then
        plan 8g $m30 --gpu-mem 8G
        bench 40 q30-8g "$B" "$commit" $m30 512,4096 3 --gpu-mem 8G
    fi
fi
if [ "$mode" = ab ]; then
    step 45 check_cuda_backend "$B/tests/cuda/check_cuda_backend"
    mk30
    if [ -f $m30 ]; then
        plan 8g $m30 --gpu-mem 8G
        bench 40 q30-8g "$B" "$commit" $m30 512,4096 3 --gpu-mem 8G
        [ -x "$BASE/guild" ] && bench 40 q30-8g-base "$BASE" "$base_commit" $m30 512,4096 3 --gpu-mem 8G
        prompt
        step 30 "routing profile of the 30B shape" sh -c '"$0" run -m "$1" -f /tmp/prompt.txt -n 16 --temp 0 \
            --threads 14 --ctx 8192 --backend cpu --single-process --record-routing "$1.routing" > /dev/null' \
            "$B/guild" $m30
        plan 8g-profile $m30 --gpu-mem 8G --routing $m30.routing
        [ -f $m30.routing ] && bench 40 q30-8g-profile "$B" "$commit" $m30 512 3 --gpu-mem 8G --routing $m30.routing
        rm -f $m30 $m30.routing
    fi
    say "/tmp: $(df -h /tmp | tail -1)"
    step 60 "model: Qwen3-235B-A22B shape, 30 layers, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-235b-a22b \
        --layers 30 --fill pool --threads "$(nproc)" -q -o $m235
    if [ -f $m235 ]; then
        dense=$("$B/guild" plan -m $m235 --backend cuda --batch 4096 --ctx 4160 --gpu-mem 1G 2>&1 |
            sed -n 's/.*the dense part needs \([0-9.]*\) GiB.*/\1/p' | head -1)
        tight235=$(awk -v d="${dense:-3}" 'BEGIN { printf "%.1fG", d + 1.5 }')
        say "235B shape: dense part ${dense:-unknown} GiB, tight budget $tight235"
        plan 235-tight $m235 --gpu-mem "$tight235"
        bench 60 q235-tight "$B" "$commit" $m235 512,4096 1 --gpu-mem "$tight235"
        plan 24g $m235 --gpu-mem 24G
        bench 60 q235-24g "$B" "$commit" $m235 512,4096 1 --gpu-mem 24G
        rm -f $m235
    fi
fi
if [ "$mode" = profile ]; then
    mk30
    if [ -f $m30 ]; then
        prompt
        profile30
        # the profile beside the model would fill every later run's GPU budget with its experts; KEEP=1 keeps the
        # model for the caller's next steps
        rm -f $m30.routing
        [ "${KEEP:-0}" = 1 ] || rm -f $m30
    fi
fi
if [ "$mode" = s24 ]; then
    step 20 "check_cuda_kernels expert_unpack" env CK_RUN_CASE=expert_unpack "$B/tests/cuda/check_cuda_kernels"
    step 15 "cuda_bench --unpack" "$B/tests/cuda/cuda_bench" --unpack
    [ -x "$BASE/cuda_bench" ] && step 15 "cuda_bench --unpack (baseline)" "$BASE/cuda_bench" --unpack
    mk30
    if [ -f $m30 ]; then
        plan 8g $m30 --gpu-mem 8G
        bench 30 q30-8g "$B" "$commit" $m30 4096 3 --gpu-mem 8G
        [ -x "$BASE/guild" ] && bench 30 q30-8g-base "$BASE" "$base_commit" $m30 4096 3 --gpu-mem 8G
        prompt
        profile30
        rm -f $m30 $m30.routing
    fi
    say "/tmp: $(df -h /tmp | tail -1)"
    step 40 "model: Qwen3-235B-A22B shape, 30 layers, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-235b-a22b \
        --layers 30 --fill pool --threads "$(nproc)" -q -o $m235
    if [ -f $m235 ]; then
        # the tight budget as the 30B shape's 3.9G: the dense part with its buffers for batches of 4096 (weights,
        # KV cache, buffers, CUDA context: the 24G plan's line) + 1.5 GiB (a refusal names the smallest batch's)
        plan 24g $m235 --gpu-mem 24G
        dense=$(sed -n 's/.*dense weights \([0-9.]*\) GiB, KV cache \([0-9.]*\) GiB.*buffers \([0-9.]*\) GiB (batches of 4096), CUDA context ~\([0-9.]*\) GiB.*/\1 \2 \3 \4/p' \
            "$O/plan-24g.txt" | head -1 | awk '{ print $1 + $2 + $3 + $4 }')
        tight235=$(awk -v d="${dense:-3.84}" 'BEGIN { printf "%.1fG", d + 1.5 }')
        say "235B shape: dense part at batches of 4096 ${dense:-unknown} GiB, tight budget $tight235"
        plan 235-tight $m235 --gpu-mem "$tight235"
        bench 60 q235-tight "$B" "$commit" $m235 4096 1 --gpu-mem "$tight235"
        bench 40 q235-24g "$B" "$commit" $m235 4096 3 --gpu-mem 24G
        rm -f $m235
    fi
    step 15 "check_cuda_backend graphs_experts_arena" env CK_RUN_CASE=graphs_experts_arena \
        "$B/tests/cuda/check_cuda_backend"
fi
kern_new() { step 100 "check_cuda_expert_mma (this build)" "$B/tests/cuda/check_cuda_expert_mma"; }
kern_base() {
    if [ -x "$BASE/check_cuda_expert_mma" ]; then
        step 45 "check_cuda_expert_mma timing (baseline kernels)" env CK_RUN_CASE=timing "$BASE/check_cuda_expert_mma"
        step 45 "check_cuda_expert_mma dense timing (baseline kernels)" env "CK_RUN_CASE=dense timing" \
            "$BASE/check_cuda_expert_mma"
    fi
}
if [ "$mode" = kern ]; then
    kern_new
    kern_base
fi
if [ "$mode" = s25 ] || [ "$mode" = s25b ]; then
    [ "$mode" = s25 ] && kern_new
    step 70 "model: Qwen3-235B-A22B shape, 30 layers, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-235b-a22b \
        --layers 30 --fill pool --threads "$(nproc)" -q -o $m235
    if [ -f $m235 ]; then
        # the tight budget of session 24: the dense part with its buffers for batches of 4096 + 1.5 GiB
        plan 24g $m235 --gpu-mem 24G
        dense=$(sed -n 's/.*dense weights \([0-9.]*\) GiB, KV cache \([0-9.]*\) GiB.*buffers \([0-9.]*\) GiB (batches of 4096), CUDA context ~\([0-9.]*\) GiB.*/\1 \2 \3 \4/p' \
            "$O/plan-24g.txt" | head -1 | awk '{ print $1 + $2 + $3 + $4 }')
        tight235=$(awk -v d="${dense:-3.89}" 'BEGIN { printf "%.1fG", d + 1.5 }')
        say "235B shape: dense part at batches of 4096 ${dense:-unknown} GiB, tight budget $tight235"
        plan 235-tight $m235 --gpu-mem "$tight235"
        bench "${BLIM:-75}" q235-tight "$B" "$commit" $m235 4096 "${RUNS:-3}" --gpu-mem "$tight235"
        [ "$mode" = s25 ] && [ -x "$BASE/guild" ] && bench "${BLIM:-75}" q235-tight-base "$BASE" "$base_commit" $m235 \
            4096 "${RUNS:-3}" --gpu-mem "$tight235"
        rm -f $m235
    fi
    [ "$mode" = s25 ] && kern_base
fi
if [ "$mode" = s26 ]; then
    # correctness side by side (their timings are not read here), the model written on the CPUs meanwhile; each
    # step is bounded by its timeout, so the waits are
    mk30 > "$O/mk30.log" 2>&1 &
    pm=$!
    step 60 "check_cuda_expert_mma bits" sh -c 'CK_RUN_CASE=bits "$0"; a=$?; CK_RUN_CASE="dense bits" "$0"; exit $((a | $?))' \
        "$B/tests/cuda/check_cuda_expert_mma" > "$O/expert_mma-bits.log" 2>&1 &
    pe=$!
    step 30 check_cuda_fused "$B/tests/cuda/check_cuda_fused" > "$O/fused.log" 2>&1 &
    pf=$!
    # the test of the test: the same program on a kernel whose odd-row offset is dropped must fail
    pb=
    if [ -x "$C/broken/check_cuda_expert_mma" ]; then
        step 40 "check_cuda_expert_mma bits, odd-row offset dropped (must fail)" env CK_RUN_CASE=bits \
            "$C/broken/check_cuda_expert_mma" > "$O/expert_mma-broken.log" 2>&1 &
        pb=$!
    fi
    step 75 check_cuda_kernels "$B/tests/cuda/check_cuda_kernels" > "$O/kernels.log" 2>&1
    wait $pm $pe $pf $pb
    cat "$O/mk30.log"
    [ -n "$pb" ] && grep -E "^[0-9]+%|^rc=|^FAIL" "$O/expert_mma-broken.log" | head -12
    for f in expert_mma-bits fused kernels; do
        grep -E "^[0-9]+%|^== |^rc=|FAIL|staged kernel|odd" "$O/$f.log" | grep -v "^PASS" | tail -12
        grep -c "^PASS" "$O/$f.log" | sed "s/^/$f: PASS lines: /"
    done
    grep -E "PASS: .*(staged kernel|768|2304)" "$O/expert_mma-bits.log" | head -24
    if [ -f $m30 ]; then
        GEN=16 bench 45 q30-8g "$B" "$commit" $m30 4096 3 --gpu-mem 8G
        [ -x "$BASE/guild" ] && GEN=16 bench 45 q30-8g-base "$BASE" "$base_commit" $m30 4096 3 --gpu-mem 8G
        rm -f $m30
    fi
    step 40 "check_cuda_expert_mma timing" env CK_RUN_CASE=timing "$B/tests/cuda/check_cuda_expert_mma"
fi
if [ "$mode" = dec235 ]; then
    if mk235; then
        plan 235-tight $m235 --gpu-mem "$tight235"
        plan 235-none $m235 --gpu-experts none
        # the order alternates between the builds, so that the VM's memory phase does not fall on one side only
        bench 75 q235-tight "$B" "$commit" $m235 512,4096 3 --gpu-mem "$tight235"
        [ -x "$BASE/guild" ] && bench 75 q235-none-base "$BASE" "$base_commit" $m235 512,4096 3 --gpu-experts none
        bench 75 q235-none "$B" "$commit" $m235 512,4096 3 --gpu-experts none
        [ -x "$BASE/guild" ] && bench 75 q235-tight-base "$BASE" "$base_commit" $m235 512,4096 3 --gpu-mem "$tight235"
        rm -f $m235
    fi
fi
say done
