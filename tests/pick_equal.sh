#!/bin/sh
# Greedy decoding takes each step's token from the backend's pick of its row (backend_forward_pick: the row reduced
# where it was computed; core/sample/logits_pick.h) instead of the row: the ids are those of the row path (the
# sampler's greedy choice on every row, which --logits-out forces as it writes the rows) and the argmax of the
# rows written (NaN as -infinity, the lowest id on ties), for several architectures, in one process and through
# the multi-process pipeline, plain and with speculative decoding's verify steps. Arguments, if any, go to every guild run (`--backend cuda` on a device: the rows
# reduced on the GPU).
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK" "$G" "$B/guild-gpu-worker" "$B/guild-cpu-worker"
need_python
make_tmp
ARGS="$*"

PROMPT="The quick brown fox jumps over the lazy dog, and then it runs away."
run() { # name, model, extra args...
    name=$1
    model=$2
    shift 2
    # shellcheck disable=SC2086
    "$G" run -m "$model" -p "$PROMPT" -n 16 --temp 0 --threads 1 --batch 5 --ids-out "$T/$name.ids" "$@" $ARGS \
        >"$T/$name.txt" 2>"$T/$name.err" || { cat "$T/$name.err"; fail "guild run $name $*"; }
}

for arch in qwen3moe gpt-oss qwen3next; do
    extra=""
    [ "$arch" = qwen3next ] && extra="--layers 4 --full-attn-interval 2"
    # shellcheck disable=SC2086
    "$MK" --arch "$arch" --layers 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --experts-used 2 \
        --expert-ff 256 --ctx 256 --type Q4_K --seed 13 -q $extra -o "$T/$arch.gguf" >"$T/mk.log" 2>&1 ||
        { cat "$T/mk.log"; fail "guild-mkmodel --arch $arch"; }
    # shellcheck disable=SC2086
    "$MK" --arch "$arch" --layers 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --experts-used 2 \
        --expert-ff 256 --ctx 256 --type Q4_K --seed 14 -q $extra -o "$T/$arch-other.gguf" >"$T/mk.log" 2>&1 ||
        { cat "$T/mk.log"; fail "guild-mkmodel --arch $arch --seed 14"; }
    for mode in single pipe; do
        flags="--single-process"
        [ $mode = pipe ] && flags="--cpu-workers 1 --spin-us 0"
        # shellcheck disable=SC2086
        run "$arch-$mode-rows" "$T/$arch.gguf" $flags --logits-out "$T/$arch-$mode.logits"
        # shellcheck disable=SC2086
        run "$arch-$mode-pick" "$T/$arch.gguf" $flags
        cmp -s "$T/$arch-$mode-rows.ids" "$T/$arch-$mode-pick.ids" ||
            fail "$arch, $mode: the picks' ids $(cat "$T/$arch-$mode-pick.ids") differ from the rows' $(cat "$T/$arch-$mode-rows.ids")"
        cmp -s "$T/$arch-$mode-rows.txt" "$T/$arch-$mode-pick.txt" || fail "$arch, $mode: the text differs"
        # speculative decoding's greedy verify steps on the picks of their rows: drafts by the model itself (every
        # one kept) and by the same shape of another seed (every one rejected)
        for d in "$arch" "$arch-other"; do
            # shellcheck disable=SC2086
            run "$d-$mode-spec" "$T/$arch.gguf" $flags --spec draft --draft-model "$T/$d.gguf" --spec-max 4
            cmp -s "$T/$arch-$mode-rows.ids" "$T/$d-$mode-spec.ids" ||
                fail "$arch, $mode: --spec draft ($d)'s ids $(cat "$T/$d-$mode-spec.ids") differ from the rows'"
        done
        [ "$(wc -w <"$T/$arch-$mode-pick.ids")" -ge 2 ] || fail "$arch, $mode: too few ids to compare"
        "$PY" - "$T/$arch-$mode.logits" "$T/$arch-$mode-pick.ids" <<'PYEOF' || fail "$arch, $mode: ids against the rows"
import array, math, sys
rows = array.array("f")
with open(sys.argv[1], "rb") as f:
    rows.frombytes(f.read())
ids = [int(t) for t in open(sys.argv[2]).read().split()]
V = len(rows) // len(ids)
assert V * len(ids) == len(rows), (len(rows), len(ids))
for k, want in enumerate(ids):
    row = rows[k * V:(k + 1) * V]
    best, m = 0, -math.inf if math.isnan(row[0]) else row[0]
    for i in range(1, V):
        if row[i] > m:
            best, m = i, row[i]
    if best != want:
        sys.exit(f"row {k}: argmax {best}, id {want}")
PYEOF
    done
    cmp -s "$T/$arch-single-pick.ids" "$T/$arch-pipe-pick.ids" || fail "$arch: the pipeline's ids differ from one process's"
done
# greedy with the repetition penalty is not a pick (gen_pickable: the penalty changes the row before its argmax;
# 0.2 raises the tokens seen): the same ids with and without --logits-out, in one process and the pipeline, and not
# the unpenalised ids (else this case would not tell a pick from a row)
for mode in single pipe; do
    flags="--single-process"
    [ $mode = pipe ] && flags="--cpu-workers 1 --spin-us 0"
    # shellcheck disable=SC2086
    run "pen-$mode-rows" "$T/qwen3moe.gguf" $flags --repeat-penalty 0.2 --repeat-last-n 16 --logits-out "$T/pen.logits"
    # shellcheck disable=SC2086
    run "pen-$mode" "$T/qwen3moe.gguf" $flags --repeat-penalty 0.2 --repeat-last-n 16
    cmp -s "$T/pen-$mode-rows.ids" "$T/pen-$mode.ids" ||
        fail "$mode, --repeat-penalty 0.2: ids $(cat "$T/pen-$mode.ids")," \
            "with --logits-out $(cat "$T/pen-$mode-rows.ids")"
    cmp -s "$T/pen-$mode.ids" "$T/qwen3moe-$mode-pick.ids" &&
        fail "$mode: --repeat-penalty 0.2 changes no id of the test's model: the case tells nothing"
done
echo "OK: greedy picks = the rows' greedy ids (3 architectures, one process and the pipeline, plain and --spec draft;" \
    "the repetition penalty on the rows)"
