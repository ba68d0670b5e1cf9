#!/bin/sh
# guild run --spec: greedy ids and logits rows equal --spec none's (ngram at K = 1, 2, 4, 8; the target as its own
# draft model, which accepts every draft; a draft model with other weights), in one process and with two CPU
# worker processes; sampling with a seed gives the same ids run after run and in both modes; the refusals
# (--spec-min-p with ngram, a draft model with another vocabulary, --draft-model or --draft-backend without
# --spec draft, a bad --draft-backend); the hybrids (qwen3next, qwen35moe): ngram and draft ids and logits equal
# --spec none's in one process and with two CPU workers (the recurrent state rolled back in the GPU worker);
# guild bench run --spec writes the counters in its JSON.
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK" "$G" "$B/guild-gpu-worker" "$B/guild-cpu-worker"
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

mk() { # file, seed, vocab, type
    "$MK" --arch qwen3moe --layers 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 16 --experts 4 --experts-used 2 \
        --expert-ff 32 --ctx 256 --type "$4" --seed "$2" --vocab "$3" -q -o "$1" >"$T/mk.log" 2>&1 ||
        { cat "$T/mk.log"; fail "guild-mkmodel $1"; }
}
mk "$T/t.gguf" 11 400 Q8_0
mk "$T/o.gguf" 12 400 Q8_0
mk "$T/v.gguf" 11 401 Q8_0
mk "$T/q.gguf" 11 400 Q4_K # the target's weights quantized coarser: a draft that is right now and then

PROMPT="one two three four, one two three four, one two three four, one two three"
run() { # name, extra args...
    name=$1
    shift
    "$G" run -m "$T/t.gguf" -p "$PROMPT" -n 64 --ignore-eos --threads 1 --batch 16 \
        --ids-out "$T/$name.ids" --logits-out "$T/$name.logits" "$@" >"$T/$name.txt" 2>"$T/$name.err" ||
        { cat "$T/$name.err"; fail "guild run $name $*"; }
}
same() { # reference, name
    for f in ids logits txt; do
        cmp -s "$T/$1.$f" "$T/$2.$f" || fail "$2: $f differ from $1"
    done
}
stat_line() { # name: the speculative counters line
    grep "speculative: .* drafted" "$T/$1.err" || fail "$1: no speculative counters"
}

run none --temp 0 --single-process
for k in 1 2 4 8; do
    run "ngram$k" --temp 0 --single-process --spec ngram --spec-max $k
    same none "ngram$k"
    stat_line "ngram$k" | grep -q " 0 drafted" && fail "ngram, K = $k: nothing drafted"
done
run ngram-mp --temp 0 --cpu-workers 2 --spin-us 0 --spec ngram --spec-max 4
same none ngram-mp
same ngram4 ngram-mp
[ "$(stat_line ngram4 | sed 's/;.*//')" = "$(stat_line ngram-mp | sed 's/;.*//')" ] ||
    fail "ngram: the counters differ between one process and two CPU workers"

run self --temp 0 --single-process --spec draft --draft-model "$T/t.gguf" --spec-max 8
same none self
stat_line self | grep -q "(100.0%)" || { stat_line self; fail "the target as its own draft model: not 100% accepted"; }
# --draft-backend cpu said (the default), with the target in a GPU worker and two CPU workers (cuda: tests/cuda)
run self-mp --temp 0 --cpu-workers 2 --spin-us 0 --spec draft --draft-model "$T/t.gguf" --draft-backend cpu --spec-max 8
same none self-mp
stat_line self-mp | grep -q "(100.0%)" || { stat_line self-mp; fail "--draft-backend cpu, the target: not 100% accepted"; }
run other --temp 0 --cpu-workers 2 --spin-us 0 --spec draft --draft-model "$T/o.gguf" --spec-max 2
same none other
# steps that keep some drafts and truncate the rest, in one process and with two CPU workers
run near --temp 0 --single-process --spec draft --draft-model "$T/q.gguf" --spec-max 4
run near-mp --temp 0 --cpu-workers 2 --spin-us 0 --spec draft --draft-model "$T/q.gguf" --spec-max 4 --draft-threads 2
same none near
same none near-mp
stat_line near | grep -Eq " 0 accepted|\(100.0%\)" && { stat_line near; fail "the Q4_K draft: no partial acceptance"; }
[ "$(stat_line near | sed 's/;.*//')" = "$(stat_line near-mp | sed 's/;.*//')" ] ||
    fail "draft: the counters differ between one process and two CPU workers"

# sampling: the same seed, the same ids, in one process or two CPU workers, with either drafter
run s1 --temp 0.9 --seed 5 --single-process --spec ngram
run s2 --temp 0.9 --seed 5 --cpu-workers 2 --spin-us 0 --spec ngram
same s1 s2
run d1 --temp 0.9 --seed 5 --single-process --spec draft --draft-model "$T/o.gguf"
run d2 --temp 0.9 --seed 5 --single-process --spec draft --draft-model "$T/o.gguf"
same d1 d2

# the other attention kinds' caches are truncated back as well: latent attention (deepseek2), a dense first layer and
# partial RoPE (glm4moe), sliding windows and sinks (gpt-oss); the target's weights in F16 as the draft model (right
# now and then) (--spec mtp: tests/spec_mtp.sh)
for arch in deepseek2 glm4moe gpt-oss; do
    case $arch in
    deepseek2) extra="--layers 3 --nextn 1 --expert-groups 4 --groups-used 2 --q-lora 64 --kv-lora 64" ;;
    glm4moe) extra="--layers 3 --nextn 1 --expert-groups 4 --groups-used 2" ;;
    gpt-oss) extra="--sliding-window 8" ;;
    esac
    for ty in Q4_K F16; do
        # shellcheck disable=SC2086
        "$MK" --arch "$arch" --layers 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --experts-used 2 \
            --expert-ff 64 --ctx 256 --type $ty --seed 11 --vocab 400 -q $extra -o "$T/$arch-$ty.gguf" \
            >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel --arch $arch --type $ty"; }
    done
    for x in none draft; do
        "$G" run -m "$T/$arch-Q4_K.gguf" -p "$PROMPT" -n 48 --ignore-eos --temp 0 --threads 1 --single-process \
            --spec $x $([ $x = draft ] && echo --draft-model "$T/$arch-F16.gguf") --ids-out "$T/$arch-$x.ids" \
            --logits-out "$T/$arch-$x.logits" >"$T/$arch-$x.txt" 2>"$T/$arch-$x.err" ||
            { cat "$T/$arch-$x.err"; fail "guild run $arch --spec $x"; }
    done
    same "$arch-none" "$arch-draft"
    stat_line "$arch-draft" | grep -q " 0 accepted" && { stat_line "$arch-draft"; fail "$arch: no draft accepted"; }
done

# guild bench run --spec: the counters in its JSON (the target as its own draft model: every draft accepted)
"$G" bench run -m "$T/t.gguf" --populate 32,48 --gen 16 --runs 1 --single-process --backend cpu --threads 1 \
    --dram-gbs 10 --prompt-period 8 --spec draft --draft-model "$T/t.gguf" --spec-max 3 --json "$T/b.json" \
    >"$T/b.txt" 2>"$T/b.err" || { cat "$T/b.err"; fail "guild bench run --spec draft"; }
for f in '"kind": "draft"' '"acceptance_rate": 1.0' '"tokens_per_step": 4.0' '"verify_steps": 4' '"prompt_period": 8'; do
    grep -q "$f" "$T/b.json" || { cat "$T/b.json"; fail "guild bench run --spec: no $f in its JSON"; }
done

refused() { # expected message, args...
    want=$1
    shift
    if "$G" run -m "$T/t.gguf" -p "$PROMPT" -n 4 --single-process "$@" >"$T/r.txt" 2>"$T/r.err"; then
        fail "guild run $* was not refused"
    fi
    grep -q -- "$want" "$T/r.err" || { cat "$T/r.err"; fail "guild run $*: no '$want'"; }
}
refused "--spec mtp: this qwen3moe model has no multi-token-prediction layer" --spec mtp
refused "--spec-min-p gates a drafter" --spec ngram --spec-min-p 0.5
refused "vocabularies must be the same" --spec draft --draft-model "$T/v.gguf"
refused "--draft-model needs --spec draft" --draft-model "$T/o.gguf"
refused "--spec draft needs --draft-model" --spec draft
refused "--draft-threads needs --spec draft" --spec ngram --draft-threads 2
refused "--draft-backend needs --spec draft" --spec ngram --draft-backend cpu
refused "--draft-backend: 'tpu' is not cpu or cuda" --spec draft --draft-model "$T/t.gguf" --draft-backend tpu
refused "unknown drafter 'medusa'" --spec medusa
refused "--spec-max" --spec ngram --spec-max 17
# the hybrids with gated delta net layers: a rejected draft rolls their recurrent state back (in this process, or
# in the GPU worker with two CPU workers)
for arch in qwen3next qwen35moe; do
    for ty in Q8_0 Q4_K; do
        "$MK" --arch $arch --layers 4 --full-attn-interval 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 16 \
            --experts 4 --experts-used 2 --expert-ff 32 --ctx 256 --type $ty --seed 11 --vocab 400 -q \
            -o "$T/$arch-$ty.gguf" >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel --arch $arch"; }
    done
    # guild plan counts the states a rollback keeps on the GPU with --spec, none without
    for x in none ngram; do
        "$G" plan -m "$T/$arch-Q8_0.gguf" --backend cpu --gpu-mem 64G --spec $x --spec-max 4 >"$T/plan-$x.txt" \
            2>&1 || { cat "$T/plan-$x.txt"; fail "guild plan $arch --spec $x"; }
    done
    grep -q "recurrent states kept for a rollback" "$T/plan-ngram.txt" ||
        { cat "$T/plan-ngram.txt"; fail "guild plan $arch --spec ngram: no rollback states"; }
    grep -q "rollback" "$T/plan-none.txt" && { cat "$T/plan-none.txt"; fail "guild plan $arch: rollback states without --spec"; }
    for x in none ngram self q4 ngram-mp q4-mp; do
        case $x in
        none | ngram) extra="--spec $x --single-process" ;;
        ngram-mp) extra="--spec ngram --cpu-workers 2 --spin-us 0" ;;
        q4-mp) extra="--spec draft --draft-model $T/$arch-Q4_K.gguf --cpu-workers 2 --spin-us 0" ;;
        self) extra="--spec draft --draft-model $T/$arch-Q8_0.gguf --single-process" ;;
        q4) extra="--spec draft --draft-model $T/$arch-Q4_K.gguf --single-process" ;;
        esac
        # shellcheck disable=SC2086
        "$G" run -m "$T/$arch-Q8_0.gguf" -p "$PROMPT" -n 48 --ignore-eos --temp 0 --threads 1 \
            --spec-max 4 $extra --ids-out "$T/$arch-$x.ids" --logits-out "$T/$arch-$x.logits" >"$T/$arch-$x.txt" \
            2>"$T/$arch-$x.err" || { cat "$T/$arch-$x.err"; fail "guild run $arch $extra"; }
        [ $x = none ] && continue
        same "$arch-none" "$arch-$x"
        # (the random model's text seldom repeats itself: ngram may find nothing to draft; check_spec's does)
        case $x in ngram*) continue ;; esac
        stat_line "$arch-$x" | grep -q " 0 drafted" && fail "$arch, $x: nothing drafted"
    done
    stat_line "$arch-self" | grep -q "(100.0%)" || { stat_line "$arch-self"; fail "$arch as its own draft model"; }
    stat_line "$arch-q4" | grep -Eq " 0 accepted|\(100.0%\)" && { stat_line "$arch-q4"; fail "$arch: no partial acceptance"; }
    [ "$(stat_line "$arch-q4" | sed 's/;.*//')" = "$(stat_line "$arch-q4-mp" | sed 's/;.*//')" ] ||
        fail "$arch: the counters differ between one process and two CPU workers"
done
echo "PASS: spec_equal"
