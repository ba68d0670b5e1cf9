#!/bin/sh
# qwen3next files in the older fused form (llama.cpp's first converter: one blk.L.ssm_in per gated delta net layer,
# per key head its q, k, v and z rows) load and compute as the split form (attn_qkv, attn_gate): guild-mkmodel
# writes one random model in both forms (--gdn-fused draws each ssm_in row as the split form's row in its place),
# and guild run's greedy ids and logits rows are the same bytes, F32 and Q8_0, in one process and with a CPU worker
# process; the fused form's tensors are what guild inspect lists; --gdn-fused is refused for another architecture.
set -u
B=${GUILD_BUILDDIR:-.}
MK=$B/tools/guild-mkmodel
G=$B/guild
for f in "$MK" "$G" "$B/guild-gpu-worker" "$B/guild-cpu-worker"; do
    if [ ! -x "$f" ]; then
        echo "SKIP: $f is not built"
        exit 77
    fi
done
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

fail() {
    echo "FAIL: $*"
    exit 1
}

SHAPE="--arch qwen3next --layers 4 --full-attn-interval 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 16 --experts 4
 --experts-used 2 --expert-ff 32 --shared-ff 32 --ssm-state 16 --ssm-groups 2 --ssm-heads 4 --ctx 256 --seed 11
 --vocab 400 -q"
for ty in F32 Q8_0; do
    # shellcheck disable=SC2086
    "$MK" $SHAPE --type $ty -o "$T/split-$ty.gguf" >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "mkmodel $ty"; }
    # shellcheck disable=SC2086
    "$MK" $SHAPE --type $ty --gdn-fused -o "$T/fused-$ty.gguf" >"$T/mk.log" 2>&1 ||
        { cat "$T/mk.log"; fail "mkmodel --gdn-fused $ty"; }
    "$G" inspect "$T/fused-$ty.gguf" >"$T/inspect.txt" 2>&1 || { cat "$T/inspect.txt"; fail "guild inspect"; }
    grep -q "blk.0.ssm_in.weight" "$T/inspect.txt" || fail "$ty: the fused file has no blk.0.ssm_in.weight"
    grep -q "attn_qkv\|attn_gate" "$T/inspect.txt" && fail "$ty: the fused file has attn_qkv or attn_gate"
    for form in split fused; do
        for mode in single mp; do
            if [ $mode = single ]; then m="--single-process"; else m="--cpu-workers 1 --spin-us 0"; fi
            # shellcheck disable=SC2086
            "$G" run --backend cpu -m "$T/$form-$ty.gguf" -p "one two three four five six seven eight nine ten" -n 24 --temp 0 \
                --ignore-eos --threads 1 --batch 8 $m --ids-out "$T/$form-$ty-$mode.ids" \
                --logits-out "$T/$form-$ty-$mode.logits" >"$T/$form-$ty-$mode.txt" 2>"$T/run.err" ||
                { cat "$T/run.err"; fail "guild run $form $ty $mode"; }
        done
    done
    for f in ids logits txt; do
        for mode in single mp; do
            cmp -s "$T/split-$ty-single.$f" "$T/fused-$ty-$mode.$f" ||
                fail "$ty: the fused form's $f ($mode) differ from the split form's"
        done
    done
    echo "$ty: split and fused forms: the same $(wc -w <"$T/split-$ty-single.ids") ids and logits"
done
# shellcheck disable=SC2086
"$MK" --arch qwen35moe --layers 2 --full-attn-interval 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 16 \
    --experts 4 --experts-used 2 --expert-ff 32 --gdn-fused -q -o "$T/x.gguf" >"$T/mk.log" 2>&1 &&
    fail "--gdn-fused with qwen35moe was not refused"
grep -q "only qwen3next" "$T/mk.log" || { cat "$T/mk.log"; fail "--gdn-fused qwen35moe: not the reason"; }
echo "PASS: gdn_fused"
