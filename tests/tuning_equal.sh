#!/bin/sh
# guild run uses the model's tuning file (MODEL.gguf.tuning, written by `guild optimize`) in both modes and says
# so, and the output stays the same bits: token ids and logits of the single-process reference without the
# file (--no-tuning) equal those with the file, single process and with CPU worker processes (which get the row
# blocks in their Assign options and say so with -v), also with gate and up rows interleaved; --threads wins over
# the file's threads; a malformed file is an error naming it, which --no-tuning skips.
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK" "$G" "$B/guild-gpu-worker" "$B/guild-cpu-worker"
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

PROMPT="The quick brown fox jumps over the lazy dog, and then it runs away into the forest."
run() { # name, extra args...
    name=$1
    shift
    "$G" run --backend cpu -m "$T/m.gguf" -p "$PROMPT" -n 10 --temp 0.8 --seed 5 --batch 7 \
        --ids-out "$T/$name.ids" --logits-out "$T/$name.logits" "$@" >"$T/$name.txt" 2>"$T/$name.err" ||
        { cat "$T/$name.err"; fail "guild run $name $*"; }
}
same() { # reference, name
    for f in ids logits txt; do
        cmp -s "$T/$1.$f" "$T/$2.$f" || fail "$2: $f differ from $1"
    done
}

# 256 expert rows and 128 model rows: blocks of 16 and 32 rows split every matrix into many tasks
"$MK" --arch qwen3moe --layers 2 --embd 128 --heads 4 --kv-heads 2 --head-dim 32 --experts 8 --experts-used 2 \
    --expert-ff 256 --ctx 256 --type Q4_K --seed 11 -q -o "$T/m.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; fail "guild-mkmodel"; }

run ref --single-process --threads 1
grep -q "tuning" "$T/ref.err" && fail "no tuning file, yet a tuning message: $(cat "$T/ref.err")"

printf '# test\nversion = 1\ncpu = Test CPU 9000\nthreads = 2\ngate_up_rows = 16\ndown_rows = 32\n' \
    >"$T/m.gguf.tuning"
run single --single-process
same ref single
grep -q "tuning $T/m.gguf.tuning: threads 2, gate_up_rows 16, down_rows 32 (measured on Test CPU 9000)" \
    "$T/single.err" || { cat "$T/single.err"; fail "single process: the loaded tuning is not reported"; }
grep -q "threads = 2," "$T/single.err" || { cat "$T/single.err"; fail "single process: the file's threads unused"; }

run given --single-process --threads 1
same ref given
grep -q "threads = 1," "$T/given.err" && grep -q "threads from --threads" "$T/given.err" ||
    { cat "$T/given.err"; fail "--threads does not win over the tuning file"; }

run notuning --single-process --no-tuning
same ref notuning
grep -q "tuning" "$T/notuning.err" && fail "--no-tuning: the file was still read: $(cat "$T/notuning.err")"

run multi --cpu-workers 2 --spin-us 0 -v
same ref multi
n=$(grep -c "expert row blocks from the tuning: gate/up 16, down 32" "$T/multi.err")
[ "$n" -eq 2 ] || { cat "$T/multi.err"; fail "the 2 CPU workers did not report the tuning's row blocks ($n did)"; }

# gate and up rows interleaved in the experts' copies (single process: a copy of the mapping; workers: their
# shard copies), automatic blocks
printf 'version = 1\ngate_up_rows = 0\ndown_rows = 0\ninterleave_gate_up = 1\n' >"$T/m.gguf.tuning"
run ileave --single-process --threads 2
same ref ileave
grep -q "gate/up interleaved" "$T/ileave.err" || { cat "$T/ileave.err"; fail "single process: interleaving not reported"; }
run ileavemulti --cpu-workers 2 --spin-us 0 -v
same ref ileavemulti
n=$(grep -c "gate/up rows interleaved" "$T/ileavemulti.err")
[ "$n" -eq 2 ] || { cat "$T/ileavemulti.err"; fail "the 2 CPU workers did not report interleaved gate/up rows ($n did)"; }

# what guild optimize writes (after checking the bits itself) loads and keeps them
"$G" optimize -m "$T/m.gguf" -o "$T/opt.tuning" --runs 3 --steps 4 >"$T/opt.txt" 2>&1 ||
    { cat "$T/opt.txt"; fail "guild optimize"; }
grep -q "layout" "$T/opt.txt" || { cat "$T/opt.txt"; fail "guild optimize did not measure the gate/up layout"; }
# a refused argument is named (the usage alone did not say that --runs 1 was the fault)
"$G" optimize -m "$T/m.gguf" -o "$T/bad.tuning" --runs 1 >"$T/opt1.txt" 2>&1
[ $? -eq 2 ] && grep -q -- "--runs must be at least 3" "$T/opt1.txt" ||
    { cat "$T/opt1.txt"; fail "guild optimize --runs 1: no exit status 2 naming --runs"; }
cp "$T/opt.tuning" "$T/m.gguf.tuning"
run optimized --single-process
same ref optimized

printf 'version = 1\ngate_up_rows = 24\n' >"$T/m.gguf.tuning"
"$G" run -m "$T/m.gguf" -p "$PROMPT" -n 2 --single-process >"$T/bad.txt" 2>"$T/bad.err" &&
    fail "a malformed tuning file was accepted"
grep -q "m.gguf.tuning:2:" "$T/bad.err" && grep -q -- "--no-tuning" "$T/bad.err" ||
    { cat "$T/bad.err"; fail "a malformed tuning file: the message names neither the file's line nor --no-tuning"; }
run badskip --single-process --no-tuning --threads 1
same ref badskip
echo "tuning_equal: ok"
