#!/bin/sh
# guild run --spec mtp (the model's multi-token-prediction layer drafts, coordinator/spec_mtp.c): greedy ids, text
# and logits rows equal --spec none's over 64 tokens at K = 1, 2, 4, 8 and with --spec-min-p, on deepseek2 and
# glm4moe files with an MTP layer (Q8_0 and F32), with the counters printed; guild bench run --spec mtp writes them
# in its JSON; through the multi-process pipeline (the GPU worker's backend runs the layer, ipc/step.h
# GUILD_STEP_MTP) the same ids, text and logits; an oracle's MTP layer (tests/mk_mtp_oracle: its drafts the model's
# next tokens but where that is the 10th token generated) has drafts accepted and drafts rejected, with the same
# counters in one process and in the pipeline; a qwen35moe file (its gated delta net state rolled back after
# rejected drafts) at K = 1, 4, and K = 4 in the GPU worker; refused with the reason: a model without an MTP layer.
set -u
B=${GUILD_BUILDDIR:-.}
MK=$B/tools/guild-mkmodel
G=$B/guild
ORACLE=$B/tests/mk_mtp_oracle
for f in "$MK" "$G" "$ORACLE"; do
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

PROMPT="one two three four, one two three four, one two three four, one two three"
stat_line() { # name: the speculative counters line
    grep "speculative: .* drafted" "$T/$1.err" || fail "$1: no speculative counters"
}
for arch in deepseek2 glm4moe; do
    case $arch in
    deepseek2) extra="--layers 3 --expert-groups 4 --groups-used 2 --q-lora 64 --kv-lora 64 --head-dim 64" ;;
    glm4moe) extra="--layers 3 --expert-groups 4 --groups-used 2 --qk-norm" ;;
    esac
    for ty in Q8_0 F32; do
        m="$T/$arch-$ty.gguf"
        # shellcheck disable=SC2086
        "$MK" --arch "$arch" --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --experts-used 2 \
            --expert-ff 64 --ctx 256 --type $ty --seed 11 --vocab 400 --nextn 1 -q $extra -o "$m" \
            >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel --arch $arch --type $ty"; }
        run() { # name, extra args...
            name=$1
            shift
            "$G" run -m "$m" -p "$PROMPT" -n 64 --ignore-eos --temp 0 --threads 1 --batch 16 \
                --ids-out "$T/$name.ids" --logits-out "$T/$name.logits" "$@" >"$T/$name.txt" 2>"$T/$name.err" ||
                { cat "$T/$name.err"; fail "guild run $arch $ty $*"; }
            [ "$name" = none ] && return
            for f in ids logits txt; do
                cmp -s "$T/none.$f" "$T/$name.$f" || fail "$arch $ty, $name: $f differ from --spec none's"
            done
            stat_line "$name" | grep -q " 0 drafted" && fail "$arch $ty, $name: nothing drafted"
            echo "$arch $ty $name: $(stat_line "$name" | sed 's/.*speculative: //')"
        }
        run none --single-process
        for k in 1 2 4 8; do
            run "mtp$k" --single-process --spec mtp --spec-max $k
        done
        run mtp-p --single-process --spec mtp --spec-max 8 --spec-min-p 0.5
        [ $ty = Q8_0 ] && run mtp-pipeline --cpu-workers 2 --spec mtp --spec-max 4
    done
done
counts() { # name: "drafted accepted"
    stat_line "$1" | sed 's/.*speculative: //' | tr -d ',' | awk '{ print $1, $3 }'
}
m="$T/oracle.gguf"
"$MK" --arch glm4moe --layers 3 --expert-groups 4 --groups-used 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 \
    --experts 8 --experts-used 2 --expert-ff 64 --ctx 256 --type F32 --seed 11 --vocab 400 --nextn 1 -q -o "$m" \
    >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel the oracle's file"; }
arch=glm4moe ty=oracle
"$ORACLE" "$m" || fail "mk_mtp_oracle"
run none --single-process # the model's tokens (its MTP layer plays no part), then the layer wrong at the 10th
"$ORACLE" "$m" "$(awk '{ print $10 }' "$T/none.ids")" || fail "mk_mtp_oracle"
run oracle-single --single-process --spec mtp --spec-max 4
run oracle-pipeline --cpu-workers 2 --spec mtp --spec-max 4
# shellcheck disable=SC2046
set -- $(counts oracle-single)
[ $# -eq 2 ] && [ "$2" -gt 0 ] && [ "$2" -lt "$1" ] ||
    fail "the oracle: $2 of $1 drafts accepted (some, not all, expected)"
[ "$(counts oracle-pipeline)" = "$1 $2" ] ||
    fail "the oracle in the pipeline: $(counts oracle-pipeline) drafted and accepted, $1 $2 in one process"
"$G" bench run -m "$T/glm4moe-Q8_0.gguf" --populate 32,48 --gen 16 --runs 1 --single-process --backend cpu \
    --threads 1 --dram-gbs 10 --spec mtp --spec-max 3 --json "$T/b.json" >"$T/b.txt" 2>"$T/b.err" ||
    { cat "$T/b.err"; fail "guild bench run --spec mtp"; }
for f in '"kind": "mtp"' '"acceptance_rate"' '"verify_steps"'; do
    grep -q "$f" "$T/b.json" || { cat "$T/b.json"; fail "guild bench run --spec mtp: no $f in its JSON"; }
done

refused() { # model, expected message, args...
    m=$1
    want=$2
    shift 2
    if "$G" run -m "$m" -p "$PROMPT" -n 4 "$@" >"$T/r.txt" 2>"$T/r.err"; then
        fail "guild run $* was not refused"
    fi
    grep -q -- "$want" "$T/r.err" || { cat "$T/r.err"; fail "guild run $*: no '$want'"; }
}
"$MK" --arch glm4moe --layers 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 16 --experts 4 --experts-used 2 \
    --expert-ff 32 --ctx 256 --type Q8_0 --seed 11 -q -o "$T/none.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; fail "guild-mkmodel glm4moe without --nextn"; }
refused "$T/none.gguf" "--spec mtp: this glm4moe model has no multi-token-prediction layer" --single-process \
    --spec mtp
"$MK" --arch qwen35moe --layers 2 --full-attn-interval 2 --embd 64 --heads 4 --kv-heads 2 --head-dim 16 \
    --experts 4 --experts-used 2 --expert-ff 32 --ctx 256 --type Q8_0 --seed 11 --nextn 1 -q -o "$T/q35.gguf" \
    >"$T/mk.log" 2>&1 || { cat "$T/mk.log"; fail "guild-mkmodel --arch qwen35moe --nextn 1"; }
for x in none mtp1 mtp4 mtp4-mp; do
    case $x in
    none) extra="--spec none --single-process" ;;
    mtp1) extra="--spec mtp --spec-max 1 --single-process" ;;
    mtp4) extra="--spec mtp --spec-max 4 --single-process" ;;
    mtp4-mp) extra="--spec mtp --spec-max 4 --cpu-workers 2 --spin-us 0" ;;
    esac
    # shellcheck disable=SC2086
    "$G" run -m "$T/q35.gguf" -p "$PROMPT" -n 48 --ignore-eos --temp 0 --threads 1 $extra \
        --ids-out "$T/q35-$x.ids" --logits-out "$T/q35-$x.logits" >"$T/q35-$x.txt" 2>"$T/q35-$x.err" ||
        { cat "$T/q35-$x.err"; fail "guild run qwen35moe $extra"; }
    [ $x = none ] && continue
    for f in ids logits txt; do
        cmp -s "$T/q35-none.$f" "$T/q35-$x.$f" || fail "qwen35moe, $x: $f differ from --spec none's"
    done
    stat_line "q35-$x" | grep -q " 0 drafted" && fail "qwen35moe, $x: nothing drafted"
done
echo "PASS: spec_mtp"
