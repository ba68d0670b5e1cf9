#!/bin/sh
# Speculative decoding on the CUDA backend (guild run --spec, coordinator/spec.h). The backend is batch-invariant
# up to CUDA_DECODE_ROWS rows (gpu-worker/dense/backend.h), so a verify step's rows are plain decode's bits:
# greedy --spec ngram and --spec draft give --spec none's ids and logits, bit for bit, at every K; the target as
# its own draft model on the CUDA backend (--draft-backend cuda) drafts the target's own tokens and accepts 100%.
# Also: the multi-process pipeline gives the single-process tokens and logits with --spec, a sampled run with a
# seed is the same twice, and a draft model on the CPU backend (F16 weights, another model) changes nothing.
# --spec mtp (the model's multi-token-prediction layer on the GPU, gpu-worker/dense/cuda/cuda_mtp.c): greedy ids
# and logits equal --spec none's at several K on glm4moe and deepseek2 files with one, in this process and in the
# multi-process pipeline's GPU worker, acceptance printed; an oracle's layer (tests/mk_mtp_oracle) has drafts
# accepted and drafts rejected, the same counters in the GPU worker; the hybrids (qwen3next, qwen35moe) with ngram,
# self-draft and (qwen35moe) mtp give --spec none's bits (their recurrent state rolled back after a rejected draft),
# in one process and in the GPU worker.
# SKIP (77) without a CUDA device. Argument `hybrids`: the hybrids' part only (bench/device/hybrid80.sh).
set -u
B=${GUILD_BUILDDIR:-.}
part=${1:-all}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
for ty in Q4_K F16; do
    "$B/tools/guild-mkmodel" --arch qwen3moe --layers 3 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 16 \
        --experts-used 4 --expert-ff 256 --vocab 600 --ctx 512 --seed 3 --type $ty -q -o "$tmp/$ty.gguf" ||
        { echo "FAIL: guild-mkmodel"; exit 1; }
done
prompt="one two three four, one two three four, one two three four, one two three"
fails=0
model=$tmp/Q4_K.gguf
run() { # NAME ARGS... (of $model)
    name=$1
    shift
    if ! "$B/guild" run -m "$model" -p "$prompt" -n 48 --ignore-eos --backend cuda --threads 2 \
        --ids-out "$tmp/$name.ids" --logits-out "$tmp/$name.bin" "$@" >/dev/null 2>"$tmp/$name.err"; then
        if grep -q "no CUDA device" "$tmp/$name.err"; then
            echo "SKIP: no CUDA device"
            exit 77
        fi
        echo "FAIL: guild run $*:"
        cat "$tmp/$name.err"
        fails=$((fails + 1))
        return 1
    fi
}
same() { # A B WHAT
    if cmp -s "$tmp/$1.ids" "$tmp/$2.ids" && cmp -s "$tmp/$1.bin" "$tmp/$2.bin"; then
        echo "ok   $3"
    else
        echo "FAIL: $3: $1 and $2 differ"
        fails=$((fails + 1))
    fi
}
stats() { # NAME: the speculative counters' line
    grep -o '[0-9]* drafted.*per step' "$tmp/$1.err"
}
all_accepted() { # NAME WHAT
    set -- "$1" "$2" $(grep -o '[0-9]* drafted, [0-9]* accepted' "$tmp/$1.err" | tr -d ',' | awk '{ print $1, $3 }')
    if [ $# -eq 4 ] && [ "$3" -gt 0 ] && [ "$3" = "$4" ]; then
        echo "ok   $2: all $3 drafts accepted"
    else
        echo "FAIL: $2: not every draft accepted: $(stats "$1")"
        fails=$((fails + 1))
    fi
}
if [ "$part" != hybrids ]; then
    run none --temp 0 --single-process
    for k in 1 3 4 8 16; do
        run self$k --temp 0 --single-process --spec draft --draft-model "$tmp/Q4_K.gguf" --draft-backend cuda \
            --spec-max $k && same none self$k "--spec draft (the target itself, on the GPU), K = $k: --spec none's" &&
            all_accepted self$k "self-draft, K = $k"
        run ngram$k --temp 0 --single-process --spec ngram --spec-max $k &&
            same none ngram$k "--spec ngram, K = $k: --spec none's ids and logits ($(stats ngram$k))"
    done
    run f16 --temp 0 --single-process --spec draft --draft-model "$tmp/F16.gguf" --spec-max 4 &&
        same none f16 "--spec draft (another model on the CPU backend), K = 4: --spec none's ids and logits ($(stats f16))"
    run mp-single --temp 0 --single-process --spec draft --draft-model "$tmp/F16.gguf" --spec-max 4 &&
        run mp-multi --temp 0 --cpu-workers 2 --spec draft --draft-model "$tmp/F16.gguf" --spec-max 4 &&
        same mp-single mp-multi "--spec draft: the multi-process pipeline = single-process"
    run mp-self --temp 0 --cpu-workers 2 --spec draft --draft-model "$tmp/Q4_K.gguf" --draft-backend cuda --spec-max 4 &&
        all_accepted mp-self "self-draft with the multi-process pipeline, K = 4"
    run s1 --temp 0.9 --seed 7 --single-process --spec ngram --spec-max 4 &&
        run s2 --temp 0.9 --seed 7 --single-process --spec ngram --spec-max 4 && same s1 s2 "--spec ngram, sampled: reproducible"
    for arch in glm4moe deepseek2; do
        case $arch in
        glm4moe) extra="--expert-groups 4 --groups-used 2 --qk-norm --head-dim 64" ;;
        deepseek2) extra="--expert-groups 4 --groups-used 2 --q-lora 64 --kv-lora 64 --head-dim 64" ;;
        esac
        model=$tmp/$arch.gguf
        # shellcheck disable=SC2086
        "$B/tools/guild-mkmodel" --arch $arch --layers 3 --embd 256 --heads 4 --kv-heads 2 --experts 16 --experts-used 4 \
            --expert-ff 256 --vocab 600 --ctx 512 --seed 5 --type Q8_0 --nextn 1 -q $extra -o "$model" ||
            { echo "FAIL: guild-mkmodel --arch $arch --nextn 1"; exit 1; }
        run $arch-none --temp 0 --single-process || continue
        for k in 1 3 8; do
            run $arch-mtp$k --temp 0 --single-process --spec mtp --spec-max $k &&
                same $arch-none $arch-mtp$k "--spec mtp on the GPU ($arch), K = $k: --spec none's ids and logits ($(stats $arch-mtp$k))"
        done
        run $arch-mtp-mp --temp 0 --cpu-workers 2 --spec mtp --spec-max 4 &&
            same $arch-none $arch-mtp-mp "--spec mtp in the GPU worker ($arch), K = 4: --spec none's ids and logits ($(stats $arch-mtp-mp))"
    done
fi
# the hybrids (gated delta net layers): a rejected draft rolls the recurrent state back (in one process and in the
# GPU worker); qwen35moe's MTP layer drafts too
for arch in qwen3next qwen35moe; do
    nextn=
    [ $arch = qwen35moe ] && nextn="--nextn 1"
    # shellcheck disable=SC2086
    "$B/tools/guild-mkmodel" --arch $arch --layers 4 --full-attn-interval 2 --embd 256 --heads 4 --kv-heads 2 \
        --head-dim 64 --experts 16 --experts-used 4 --expert-ff 256 --vocab 600 --ctx 512 --seed 3 --type Q4_K -q \
        $nextn -o "$tmp/$arch.gguf" || { echo "FAIL: guild-mkmodel --arch $arch"; exit 1; }
    hyb() { # NAME ARGS...
        n=$1
        shift
        if ! "$B/guild" run -m "$tmp/$arch.gguf" -p "$prompt" -n 48 --ignore-eos --backend cuda --threads 2 --temp 0 \
            --ids-out "$tmp/$n.ids" --logits-out "$tmp/$n.bin" "$@" >/dev/null 2>"$tmp/$n.err"; then
            echo "FAIL: guild run $arch $*:"
            cat "$tmp/$n.err"
            fails=$((fails + 1))
            return 1
        fi
    }
    hyb $arch-none --single-process
    for k in 1 4 8 16; do
        hyb $arch-ngram$k --single-process --spec ngram --spec-max $k &&
            same $arch-none $arch-ngram$k "$arch --spec ngram, K = $k: --spec none's ids and logits ($(stats $arch-ngram$k))"
    done
    hyb $arch-self --single-process --spec draft --draft-model "$tmp/$arch.gguf" --draft-backend cuda --spec-max 4 &&
        same $arch-none $arch-self "$arch --spec draft (itself, on the GPU), K = 4: --spec none's ($(stats $arch-self))"
    hyb $arch-mp-none --cpu-workers 2 && hyb $arch-mp --cpu-workers 2 --spec ngram --spec-max 4 &&
        same $arch-mp-none $arch-mp "$arch --spec ngram with two CPU workers, K = 4: --spec none's ($(stats $arch-mp))"
    [ $arch = qwen35moe ] || continue
    hyb $arch-mtp --single-process --spec mtp --spec-max 4 &&
        same $arch-none $arch-mtp "$arch --spec mtp on the GPU, K = 4: --spec none's ($(stats $arch-mtp))"
    hyb $arch-mtp-mp --cpu-workers 2 --spec mtp --spec-max 4 &&
        same $arch-mp-none $arch-mtp-mp "$arch --spec mtp in the GPU worker, K = 4: --spec none's ($(stats $arch-mtp-mp))"
done
counts() { # NAME: "drafted accepted"
    grep -o '[0-9]* drafted, [0-9]* accepted' "$tmp/$1.err" | tr -d ',' | awk '{ print $1, $3 }'
}
if [ "$part" != hybrids ]; then
    model=$tmp/oracle.gguf
    "$B/tools/guild-mkmodel" --arch glm4moe --layers 3 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 16 \
        --experts-used 4 --expert-ff 256 --vocab 600 --ctx 512 --seed 5 --type F32 --nextn 1 -q --expert-groups 4 \
        --groups-used 2 --qk-norm -o "$model" && "$B/tests/mk_mtp_oracle" "$model" ||
        { echo "FAIL: the oracle's file"; exit 1; }
    # the model's tokens (its MTP layer plays no part), then the layer made wrong where the next token is the 10th's
    if run oracle-none --temp 0 --single-process &&
        "$B/tests/mk_mtp_oracle" "$model" "$(awk '{ print $10 }' "$tmp/oracle-none.ids")" &&
        run oracle --temp 0 --single-process --spec mtp --spec-max 4 &&
        same oracle-none oracle "--spec mtp, the oracle, K = 4: --spec none's ids and logits ($(stats oracle))" &&
        run oracle-mp --temp 0 --cpu-workers 2 --spec mtp --spec-max 4 &&
        same oracle-none oracle-mp "--spec mtp in the GPU worker, the oracle, K = 4: --spec none's ids and logits"; then
        # shellcheck disable=SC2046
        set -- $(counts oracle)
        if [ $# -eq 2 ] && [ "$2" -gt 0 ] && [ "$2" -lt "$1" ] && [ "$(counts oracle-mp)" = "$1 $2" ]; then
            echo "ok   the oracle: $2 of $1 drafts accepted, the same in the GPU worker"
        else
            echo "FAIL: the oracle: $(counts oracle) drafted and accepted (some, not all, expected), $(counts oracle-mp) in the GPU worker"
            fails=$((fails + 1))
        fi
    fi
fi
[ $fails -eq 0 ] || exit 1
echo "PASS: spec_cuda"
