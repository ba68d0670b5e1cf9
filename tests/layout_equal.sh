#!/bin/sh
# The CPU experts' packed layout (core/kern/pack.h; --expert-layout, the tuning file's `layout`) changes no bit:
# token ids and logits of the single-process reference over the file's plain rows equal those with packed
# experts, single process and with CPU worker processes, for q4_K, iq4_xs and the Q4_K_M mix (q4_K beside
# other types, packed where they have a layout). The workers and the single process say what they packed (-v); the
# tuning file's layout reaches the workers, --expert-layout wins over it; bad values are errors.
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK" "$G" "$B/guild-gpu-worker" "$B/guild-cpu-worker"
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

PROMPT="The quick brown fox jumps over the lazy dog, and then it runs away into the forest."
run() { # name, model, extra args...
    name=$1
    model=$2
    shift 2
    "$G" run --backend cpu -m "$T/$model.gguf" -p "$PROMPT" -n 8 --temp 0.8 --seed 5 --batch 7 \
        --ids-out "$T/$name.ids" --logits-out "$T/$name.logits" "$@" >"$T/$name.txt" 2>"$T/$name.err" ||
        { cat "$T/$name.err"; fail "guild run $name $*"; }
}
same() { # reference, name
    for f in ids logits txt; do
        cmp -s "$T/$1.$f" "$T/$2.$f" || fail "$2: $f differ from $1"
    done
}
# "layout L (N matrices packed)" lines of a run's stderr: how many, and whether each packed exactly N
packed_lines() { # name, layout, N
    grep -c "layout $2 ($3 matrices packed)" "$T/$1.err"
}

# 256-wide rows and expert rows: whole q4_K / iq4_xs blocks and 16-row groups; 2 layers of 8 experts
mk() { # name, type args...
    name=$1
    shift
    "$MK" --arch qwen3moe --layers 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 \
        --experts-used 2 --expert-ff 256 --ctx 256 --seed 11 -q -o "$T/$name.gguf" "$@" >"$T/mk.log" 2>&1 ||
        { cat "$T/mk.log"; fail "guild-mkmodel $name $*"; }
}
mk q4 --type Q4_K
mk iq --type IQ4_XS
mk mix # the Q4_K_M recipe: q4_K gate/up, another down type in some layers

for m in q4 iq mix; do
    run "$m-ref" "$m" --single-process --threads 1 --expert-layout plain
    [ -s "$T/$m-ref.logits" ] || fail "$m: no logits written"
    grep -q "experts copied" "$T/$m-ref.err" && fail "$m: --expert-layout plain copied the experts"
    run "$m-single" "$m" --single-process --threads 2 --expert-layout packed -v
    same "$m-ref" "$m-single"
    n=$(sed -n 's/.*experts copied out of the model file: .*, layout packed (\([0-9]*\) matrices packed).*/\1/p' \
        "$T/$m-single.err")
    [ -n "$n" ] && [ "$n" -gt 0 ] || { cat "$T/$m-single.err"; fail "$m: the single process packed nothing"; }
    run "$m-multi" "$m" --cpu-workers 2 --threads 1 --spin-us 0 --expert-layout packed -v
    same "$m-ref" "$m-multi"
    # each worker owns half the experts: half the matrices
    [ "$(packed_lines "$m-multi" packed $((n / 2)))" -eq 2 ] ||
        { cat "$T/$m-multi.err"; fail "$m: the 2 CPU workers did not each pack $((n / 2)) matrices"; }
done
# q4_K and iq4_xs pack every matrix (the mix packs what has a layout: check_expert_pipe tests which)
[ "$(packed_lines q4-multi packed 24)" -eq 2 ] || fail "q4: not every matrix packed"
[ "$(packed_lines iq-multi packed 24)" -eq 2 ] || fail "iq: not every matrix packed"

# the default (auto): the same bits whatever this CPU has; plain workers pack nothing
run q4-auto q4 --single-process
same q4-ref q4-auto
run q4-plainmulti q4 --cpu-workers 2 --threads 1 --spin-us 0 --expert-layout plain -v
same q4-ref q4-plainmulti
[ "$(packed_lines q4-plainmulti plain 0)" -eq 2 ] || { cat "$T/q4-plainmulti.err"; fail "plain workers"; }

# the tuning file's layout reaches the workers; --expert-layout wins over it
printf 'version = 1\nlayout = packed\n' >"$T/q4.gguf.tuning"
run q4-tuned q4 --cpu-workers 2 --threads 1 --spin-us 0 -v
same q4-ref q4-tuned
grep -q "tuning $T/q4.gguf.tuning: .*layout packed" "$T/q4-tuned.err" ||
    { cat "$T/q4-tuned.err"; fail "the tuning file's layout is not reported"; }
[ "$(packed_lines q4-tuned packed 24)" -eq 2 ] || { cat "$T/q4-tuned.err"; fail "the file's layout did not reach the workers"; }
run q4-override q4 --cpu-workers 2 --threads 1 --spin-us 0 --expert-layout plain -v
same q4-ref q4-override
grep -q "layout from --expert-layout" "$T/q4-override.err" ||
    { cat "$T/q4-override.err"; fail "--expert-layout over the file is not reported"; }
[ "$(packed_lines q4-override plain 0)" -eq 2 ] || { cat "$T/q4-override.err"; fail "--expert-layout lost to the file"; }

# bad values
printf 'version = 1\nlayout = fast\n' >"$T/q4.gguf.tuning"
"$G" run -m "$T/q4.gguf" -p "$PROMPT" -n 2 --single-process >"$T/bad.txt" 2>"$T/bad.err" &&
    fail "a tuning file with layout = fast was accepted"
grep -q "q4.gguf.tuning:2: layout = fast" "$T/bad.err" || { cat "$T/bad.err"; fail "bad layout in the file: message"; }
rm -f "$T/q4.gguf.tuning"
"$G" run -m "$T/q4.gguf" -p "$PROMPT" -n 2 --expert-layout fast >"$T/bad.txt" 2>"$T/bad.err" &&
    fail "--expert-layout fast was accepted"
grep -q -- "--expert-layout fast: expected auto, plain or packed" "$T/bad.err" ||
    { cat "$T/bad.err"; fail "--expert-layout fast: message"; }
"$G" serve --help 2>&1 | grep -q -- "--expert-layout" || fail "guild serve --help does not list --expert-layout"
echo "layout_equal: ok"
