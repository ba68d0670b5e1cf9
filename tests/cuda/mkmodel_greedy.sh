#!/bin/sh
# guild-mkmodel models of every architecture (small shapes, llama.cpp's Q4_K_M type choices): the CUDA
# backend's greedy tokens against the CPU backend's for 32 steps (check_cuda_backend FILE...: teacher-forced,
# near-ties and rounding flips as described there; strict with the F32 cache, reported with the F16 one),
# then `guild run --backend cuda` through the CLI: the multi-process pipeline must give the single-process
# tokens exactly; how many agree with `--backend cpu` is printed. Then the experts on the CPU workers through
# the arena driven from the device (in-graph doorbells, CUDA graphs) with 1-3 workers, and without graphs: the
# logits must be the single-process run's over the same experts, bit for bit; and a budget keeping some
# layers' experts on the GPU, multi-process = single-process; and a budget that streams, through guild-stager,
# a stager thread and pageable copies, the same bits (below). SKIP (77) without a CUDA device.
set -u
B=${GUILD_BUILDDIR:-.}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
archs="qwen3moe qwen2moe mixtral olmoe gpt-oss glm4moe qwen3next qwen35moe deepseek2"
for a in $archs; do
    extra=""
    [ "$a" = qwen2moe ] && extra="--shared-ff 512"
    [ "$a" = gpt-oss ] && extra="--sliding-window 16" # slides within the prompt and the 32 steps
    # glm4moe: a dense first layer, groups, q/k norms, an MTP layer (loaded, never run)
    [ "$a" = glm4moe ] && extra="--ff 512 --nextn 1 --expert-groups 4 --groups-used 2 --qk-norm"
    # the hybrids: gated delta net, gated attention, gated delta net, gated attention (the later --layers wins)
    case $a in qwen3next | qwen35moe) extra="--shared-ff 512 --layers 4 --full-attn-interval 2" ;; esac
    # deepseek2: latent attention (keys of 32 + 32 rotated, a latent of 256, a q LoRA of 128), the same FFN side
    [ "$a" = deepseek2 ] && extra="--ff 512 --nextn 1 --expert-groups 4 --groups-used 2 --q-lora 128 --kv-lora 256"
    # shellcheck disable=SC2086
    if ! "$B/tools/guild-mkmodel" --arch "$a" --layers 3 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 \
        --experts 16 --experts-used 4 --expert-ff 256 $extra --vocab 600 --ctx 512 --seed 3 -q \
        -o "$tmp/$a.gguf"; then
        echo "FAIL: guild-mkmodel --arch $a"
        exit 1
    fi
done

"$B/tests/cuda/check_cuda_backend" "$tmp"/*.gguf
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -ne 0 ] && exit 1

prompt="The quick brown fox jumps over the lazy dog, and then"
fails=0
for a in $archs; do
    for mode in cpu-single cuda-single cuda-multi; do
        be=${mode%-*}
        how="--cpu-workers 2"
        [ "${mode#*-}" = single ] && how="--single-process"
        # shellcheck disable=SC2086
        if ! "$B/guild" run -m "$tmp/$a.gguf" -p "$prompt" -n 24 --temp 0 --ignore-eos --backend "$be" $how \
            --threads 4 --ids-out "$tmp/$a.$mode.ids" > /dev/null 2> "$tmp/$a.$mode.err"; then
            echo "FAIL: guild run $a --backend $be $how:"
            cat "$tmp/$a.$mode.err"
            fails=$((fails + 1))
        fi
    done
    if ! cmp -s "$tmp/$a.cuda-single.ids" "$tmp/$a.cuda-multi.ids"; then
        echo "FAIL: $a: the multi-process pipeline's tokens differ from the single-process ones (cuda):"
        cat "$tmp/$a.cuda-single.ids" "$tmp/$a.cuda-multi.ids"
        fails=$((fails + 1))
        continue
    fi
    # cpu against cuda: informational (check_cuda_backend above is the comparison with tolerances); an F16
    # cache and Q8 activation roundings may part greedy sequences at a near-tie
    same=$(awk 'NR == FNR { for (i = 1; i <= NF; i++) a[i] = $i; n = NF; next }
                { k = 0; while (k < n && k < NF && a[k + 1] == $(k + 1)) k++; print k "/" n }' \
           "$tmp/$a.cpu-single.ids" "$tmp/$a.cuda-single.ids")
    echo "ok   $a: guild run --backend cuda: single-process = multi-process; first $same tokens as --backend cpu"
done

run_logits() { # NAME ARGS...: guild run of the qwen3moe/mixtral model, logits to $tmp/NAME.bin
    name=$1
    shift
    if ! "$B/guild" run -p "$prompt" -n 16 --temp 0 --ignore-eos --backend cuda --threads 2 \
        --logits-out "$tmp/$name.bin" "$@" > /dev/null 2> "$tmp/$name.err"; then
        echo "FAIL: guild run $*:"
        cat "$tmp/$name.err"
        fails=$((fails + 1))
        return 1
    fi
}
same_logits() { # A B WHAT
    if cmp -s "$tmp/$1.bin" "$tmp/$2.bin"; then
        echo "ok   $3"
    else
        echo "FAIL: $3: logits differ ($1 vs $2)"
        fails=$((fails + 1))
    fi
}
for a in qwen3moe mixtral glm4moe; do # glm4moe: the plan around a layer without experts
    m="-m $tmp/$a.gguf"
    # shellcheck disable=SC2086
    run_logits "$a.host" $m --single-process --gpu-experts none || continue
    for k in 1 2 3; do
        # shellcheck disable=SC2086
        run_logits "$a.arena$k" $m --cpu-workers $k --gpu-experts none &&
            same_logits "$a.host" "$a.arena$k" "$a: arena from the device, $k CPU worker(s), graphs = host bridge"
    done
    # shellcheck disable=SC2086
    run_logits "$a.direct" $m --cpu-workers 2 --gpu-experts none --no-cuda-graph &&
        same_logits "$a.host" "$a.direct" "$a: arena from the device, no graphs = host bridge"
    # shellcheck disable=SC2086
    run_logits "$a.split1" $m --single-process --gpu-experts 1 &&
        run_logits "$a.split2" $m --cpu-workers 2 --gpu-experts 1 &&
        same_logits "$a.split1" "$a.split2" "$a: 1 layer's experts on the GPU, multi-process = single process"
    # shellcheck disable=SC2086
    run_logits "$a.budget1" $m --single-process --gpu-mem 4G &&
        run_logits "$a.budget2" $m --cpu-workers 1 --gpu-mem 4G &&
        same_logits "$a.budget1" "$a.budget2" "$a: --gpu-mem 4G, multi-process = single process"
done

# The stager: a plan that streams whole layers at batches of 512 (this model's experts are so small that any
# budget leaving room for the chunk's buffers keeps them all resident: --gpu-experts 1 keeps layer 0 resident and
# streams the other two), a long prompt in one batch, the split forced so that the same experts go to each side
# run after run. The logits through guild-stager's pinned ring (multi-process, --stager process) must be the
# pageable copies' (--stager none) bit for bit, and the single process's with its in-process ring (--stager
# thread), and the copies from page-locked copies (--stager pin), and straight from the CPU side's own copies
# (--stager shared: the CPU worker's expert store, the single process's packed or plain copies); the
# multi-process runs' streaming counters reach the coordinator (guild run's "streamed experts" line).
a=qwen3moe
stream_mem="4G --gpu-experts 1"
# shellcheck disable=SC2086
if ! "$B/guild" run -m "$tmp/$a.gguf" --backend cuda --print-plan --batch 512 --gpu-mem $stream_mem 2>/dev/null |
    grep -q "streamed to the GPU"; then
    echo "FAIL: $a: --gpu-mem $stream_mem --batch 512: the plan does not stream"
    fails=$((fails + 1))
else
    : > "$tmp/long.txt"
    for i in 1 2 3 4 5 6 7 8 9 10 11 12; do printf '%s ' "$prompt" >> "$tmp/long.txt"; done
    stage_run() { # NAME ARGS...
        name=$1
        shift
        # shellcheck disable=SC2086
        if ! "$B/guild" run -m "$tmp/$a.gguf" -f "$tmp/long.txt" -n 8 --temp 0 --ignore-eos --backend cuda \
            --threads 2 --batch 512 --gpu-mem $stream_mem --force-split 0.5 --logits-out "$tmp/$name.bin" "$@" \
            > /dev/null 2> "$tmp/$name.err"; then
            echo "FAIL: guild run --gpu-mem $stream_mem --force-split 0.5 $*:"
            cat "$tmp/$name.err"
            fails=$((fails + 1))
            return 1
        fi
        if ! grep "streamed experts" "$tmp/$name.err"; then
            echo "FAIL: $name: guild run reports no streamed experts"
            fails=$((fails + 1))
            return 1
        fi
    }
    stage_run stage.none --cpu-workers 1 --stager none &&
        stage_run stage.process --cpu-workers 1 --stager process &&
        same_logits stage.none stage.process "$a: --gpu-mem $stream_mem, streamed through guild-stager = pageable copies"
    stage_run stage.thread --single-process --stager thread &&
        same_logits stage.none stage.thread "$a: --gpu-mem $stream_mem, single process's stager thread = pageable copies"
    stage_run stage.pin --cpu-workers 1 --stager pin &&
        same_logits stage.none stage.pin "$a: --gpu-mem $stream_mem, copies from page-locked copies = pageable copies"
    stage_run stage.shared --cpu-workers 1 --stager shared &&
        same_logits stage.none stage.shared "$a: --gpu-mem $stream_mem, from the CPU worker's expert store = pageable copies"
    stage_run stage.shared1 --single-process --stager shared &&
        same_logits stage.none stage.shared1 "$a: --gpu-mem $stream_mem, single process, from its executor's copies (packed where this CPU packs) = pageable copies"
    stage_run stage.sharedp --single-process --stager shared --expert-layout packed &&
        same_logits stage.none stage.sharedp "$a: --gpu-mem $stream_mem, single process, packed copies unpacked on the device = pageable copies"
    for name in stage.process stage.thread; do
        [ -f "$tmp/$name.err" ] || continue
        if ! grep -Eq "streamed experts: [1-9][0-9]* layer batches .* copied, ([1-9][0-9]*\.[0-9]|0\.[1-9]) MB through" \
            "$tmp/$name.err"; then
            echo "FAIL: $name: no streamed layer batches, or no bytes through the stager's ring, reported"
            fails=$((fails + 1))
        fi
    done
    if [ -f "$tmp/stage.none.err" ] &&
        ! grep -Eq "streamed experts: [1-9][0-9]* layer batches .* copied, 0\.0 MB through" "$tmp/stage.none.err"; then
        echo "FAIL: stage.none: expected streamed layer batches and nothing through a ring"
        fails=$((fails + 1))
    fi
fi
[ $fails -eq 0 ]
