#!/bin/sh
# Speculative decoding on the CUDA backend (guild run --spec, coordinator/spec.h). The CUDA attention of a verify
# step is not summed as in plain decode (the decode kernel splits a batch's keys by the span of the whole batch,
# batches over 4 rows take the prefill kernel), so the verified rows are not plain decode's bits: how many greedy
# tokens agree with --spec none, and the acceptance, are printed. Strict: the multi-process pipeline gives the
# single-process tokens and logits with --spec (the same kernels on the same device), and a sampled run with a
# seed is the same twice. SKIP (77) without a CUDA device.
set -u
B=${GUILD_BUILDDIR:-.}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
for ty in Q4_K F16; do
    "$B/tools/guild-mkmodel" --arch qwen3moe --layers 3 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 16 \
        --experts-used 4 --expert-ff 256 --vocab 600 --ctx 512 --seed 3 --type $ty -q -o "$tmp/$ty.gguf" ||
        { echo "FAIL: guild-mkmodel"; exit 1; }
done
prompt="one two three four, one two three four, one two three four, one two three"
fails=0
run() { # NAME ARGS...
    name=$1
    shift
    if ! "$B/guild" run -m "$tmp/Q4_K.gguf" -p "$prompt" -n 48 --ignore-eos --backend cuda --threads 2 \
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
run none --temp 0 --single-process
for k in 1 3 4 8; do
    for d in self f16; do
        model=$tmp/Q4_K.gguf
        [ $d = f16 ] && model=$tmp/F16.gguf
        run "$d$k" --temp 0 --single-process --spec draft --draft-model "$model" --spec-max $k || continue
        agree=$(awk 'NR == FNR { for (i = 1; i <= NF; i++) a[i] = $i; n = NF; next }
                     { k = 0; while (k < n && k < NF && a[k + 1] == $(k + 1)) k++; print k "/" n }' \
                "$tmp/none.ids" "$tmp/$d$k.ids")
        echo "info draft $d, K = $k: first $agree tokens as --spec none; $(grep -o '[0-9]* drafted.*per step' "$tmp/$d$k.err")"
    done
done
run mp-single --temp 0 --single-process --spec draft --draft-model "$tmp/F16.gguf" --spec-max 4 &&
    run mp-multi --temp 0 --cpu-workers 2 --spec draft --draft-model "$tmp/F16.gguf" --spec-max 4 &&
    same mp-single mp-multi "--spec draft: the multi-process pipeline = single-process"
run s1 --temp 0.9 --seed 7 --single-process --spec ngram --spec-max 4 &&
    run s2 --temp 0.9 --seed 7 --single-process --spec ngram --spec-max 4 && same s1 s2 "--spec ngram, sampled: reproducible"
[ $fails -eq 0 ] || exit 1
echo "PASS: spec_cuda"
