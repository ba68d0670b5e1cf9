#!/bin/sh
# guild run on bad input: a prompt longer than the context, an unknown architecture, a missing tensor, a
# missing file, bad flags. Each must give a clear message and exit status 1 (2 for usage errors), never a
# crash (status > 128) or a hang.
set -u
B=${GUILD_BUILDDIR:-.}
MK=$B/tools/guild-mkmodel
G=$B/guild
EDIT=$B/tests/gguf_edit
if [ ! -x "$MK" ]; then
    echo "SKIP: $MK is not built"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

fail() {
    echo "FAIL: $*"
    exit 1
}

# expect STATUS MESSAGE-FRAGMENT guild-args...
expect() {
    want=$1
    frag=$2
    shift 2
    timeout 60 "$G" "$@" >"$T/out" 2>"$T/err"
    st=$?
    [ "$st" -eq "$want" ] || { cat "$T/err"; fail "guild $*: exit status $st, expected $want"; }
    grep -qF -- "$frag" "$T/err" || { cat "$T/err"; fail "guild $*: message lacks '$frag'"; }
}

"$MK" --arch qwen2moe --layers 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --experts-used 2 \
    --expert-ff 256 --shared-ff 256 --ctx 256 --type Q8_0 --seed 3 -o "$T/m.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; fail "guild-mkmodel"; }
"$EDIT" "$T/m.gguf" "$T/arch.gguf" --set-arch gpt2 || fail "gguf_edit --set-arch"
"$EDIT" "$T/m.gguf" "$T/tensor.gguf" --drop-tensor blk.1.ffn_up_exps.weight || fail "gguf_edit --drop-tensor"
"$EDIT" "$T/m.gguf" "$T/key.gguf" --drop-key qwen2moe.attention.head_count || fail "gguf_edit --drop-key"

long="one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
expect 1 "more than the context of 8 (--ctx)" run -m "$T/m.gguf" -p "$long" --ctx 8
expect 1 'architecture "gpt2" is not supported' run -m "$T/arch.gguf" -p "hello"
expect 1 "tensor blk.1.ffn_up_exps.weight is missing" run -m "$T/tensor.gguf" -p "hello"
expect 1 "qwen2moe.attention.head_count is missing" run -m "$T/key.gguf" -p "hello"
expect 1 "$T/none.gguf" run -m "$T/none.gguf" -p "hello"
expect 1 "cannot open $T/none.txt" run -m "$T/m.gguf" -f "$T/none.txt"
expect 2 "--ctx 0: expected an integer" run -m "$T/m.gguf" -p "hello" --ctx 0
expect 2 "unknown option" run -m "$T/m.gguf" -p "hello" --no-such-flag
expect 1 "top-p must be in (0, 1]" run -m "$T/m.gguf" -p "hello" --top-p 1.5
# the good file still works, and a prompt that exactly fills the context is fine
expect 0 "stopped:" run -m "$T/m.gguf" -p "hello" -n 4 --temp 0
echo "PASS: bad input gives clear errors"
