#!/bin/sh
# The non-finite check (--check-finite, gpu-worker/dense/finite_check.h) end to end with `guild run`, in one
# process and in the multi-process pipeline: a NaN or infinity planted in a model (tests/gguf_edit; a norm, a
# shared expert, the routed experts a CPU expert worker computes, the LM head) stops the run with exit status 1
# and a message naming the layer, the tensor and the position; --check-finite off runs it to the end; a finite
# model gives the same tokens and logits bit for bit with the check on and off.
set -u
B=${GUILD_BUILDDIR:-.}
MK=$B/tools/guild-mkmodel
G=$B/guild
EDIT=$B/tests/gguf_edit
if [ ! -x "$MK" ] || [ ! -x "$EDIT" ]; then
    echo "SKIP: guild-mkmodel or tests/gguf_edit is not built"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

fail() {
    echo "FAIL: $*"
    exit 1
}

# expect STATUS MESSAGE-FRAGMENT guild-run-args...
expect() {
    want=$1
    frag=$2
    shift 2
    timeout 120 "$G" run --backend cpu --threads 2 "$@" >"$T/out" 2>"$T/err"
    st=$?
    [ "$st" -eq "$want" ] || { cat "$T/err"; fail "guild run $*: exit status $st, expected $want"; }
    [ -z "$frag" ] || grep -qF -- "$frag" "$T/err" || { cat "$T/err"; fail "guild run $*: message lacks '$frag'"; }
}

shape="--arch qwen2moe --layers 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --experts-used 2
       --expert-ff 256 --shared-ff 256 --ctx 256 --seed 3"
# shellcheck disable=SC2086
"$MK" $shape --type Q8_0 -o "$T/q.gguf" >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel Q8_0"; }
# shellcheck disable=SC2086
"$MK" $shape --type F32 -o "$T/f.gguf" >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel F32"; }

# a norm weight: its NaN never reaches the residual stream of a quantized model (the Q8_0 activations of the
# next products turn it into finite garbage), so only the norm's output check finds it
"$EDIT" "$T/q.gguf" "$T/norm.gguf" --set-nan blk.1.attn_norm.weight:17 || fail "gguf_edit norm"
# an infinity in a product of the FFN: the residual stream after layer 0
"$EDIT" "$T/f.gguf" "$T/ffn.gguf" --set-inf blk.0.ffn_down_shexp.weight:5 || fail "gguf_edit ffn"
# the routed experts (in the multi-process mode a CPU expert worker computes them, and the GPU worker adds their
# sum into the stream): a NaN in the down projection of each of layer 0's experts (256 x 256 each), so that every
# row's chosen experts have one
cp "$T/f.gguf" "$T/exps.gguf"
for e in 0 1 2 3 4 5 6 7; do
    "$EDIT" "$T/exps.gguf" "$T/exps1.gguf" --set-nan blk.0.ffn_down_exps.weight:$((e * 65536 + 5)) &&
        mv "$T/exps1.gguf" "$T/exps.gguf" || fail "gguf_edit experts"
done
# the LM head: the logits
"$EDIT" "$T/f.gguf" "$T/head.gguf" --set-nan output.weight:300 || fail "gguf_edit head"

for mode in --single-process --cpu-workers=1; do
    expect 1 "layer 1: blk.1.attn_norm.weight makes the normed residual stream not finite at position 0 (row 0 of the batch), element 17" \
        $mode -m "$T/norm.gguf" -p "hello world" -n 4 --temp 0
    expect 1 "layer 0: its output, the residual stream after its FFN part (blk.0.ffn_*), is not finite at position 0" \
        $mode -m "$T/ffn.gguf" -p "hello world" -n 4 --temp 0
    expect 1 "layer 0: its output, the residual stream after its FFN part (blk.0.ffn_*), is not finite at position 0 (row 0 of the batch)" \
        $mode -m "$T/exps.gguf" -p "hello world" -n 4 --temp 0
    expect 1 "the logits of position 3 are not finite (token id 1: nan): the LM head (output.weight)" \
        $mode -m "$T/head.gguf" -p "hello world" -n 4 --temp 0
    expect 0 "stopped:" $mode -m "$T/norm.gguf" -p "hello world" -n 4 --temp 0 --check-finite off
    expect 0 "stopped:" $mode -m "$T/head.gguf" -p "hello world" -n 4 --temp 0 --check-finite off
    # a finite model: the same bits with the check on and off (prompt in batches of 3, decode one by one)
    for m in q f; do
        for chk in on off; do
            expect 0 "stopped:" $mode -m "$T/$m.gguf" -p "one two three four five six seven" -n 6 --temp 0.7 \
                --seed 5 --batch 3 --check-finite $chk --ids-out "$T/$m-$chk.ids" --logits-out "$T/$m-$chk.logits"
        done
        cmp -s "$T/$m-on.ids" "$T/$m-off.ids" && cmp -s "$T/$m-on.logits" "$T/$m-off.logits" ||
            fail "$mode $m: --check-finite on and off differ"
    done
done
expect 2 "--check-finite maybe: expected on or off" -m "$T/q.gguf" -p "x" --check-finite maybe
echo "PASS: planted NaN and infinity stop guild run with the layer, tensor and position; the check changes no bit"
