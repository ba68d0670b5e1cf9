#!/bin/sh
# guild bench trace on traces written by hand (core/prof/prof_trace.h's file): 8 layers, each a norm, the
# exchange's wait for the CPU workers and a product, an LM head a step; a prompt's pass, ten decode steps and a
# failed one. The decode steps after --skip summed: the step wall, "busy a layer" with the wait and "dense busy a
# layer" without it (the LM head, once a step, in neither); --tokens choosing the prompt's pass; a trace without
# such steps, a malformed one, a missing file and bad flags refused. Then the flags that ask for a trace:
# --gpu-prof of another backend refused, guild-gpu-worker --prof without a file name refused, and in a build
# without CUPTI both refused saying so.
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$G"
make_tmp
F=$T/t.trace
# step i (0..11) at i * 100000 ns, 50000 long: step 0 the prompt (512 rows), 1..10 decode, 11 a failed decode
awk 'BEGIN {
    print "guild-trace 1"; print "layers 8"; print "dropped 0"; print "model /m/x.gguf"
    print "name 0 rmsnorm_cl_kernel"; print "name 1 xchg_wait_kernel"
    print "name 2 matmul_q_multi2_kernel<(int)12, (int)14, 1, 2>"; print "name 3 lm_head"
    for (i = 0; i < 12; i++) {
        s = i * 100000
        printf "step %d %d %s %d 1 %d\n", s, s + 50000, i == 0 ? "forward" : "seqs", i == 0 ? 512 : 1, i < 11
        for (l = 0; l < 8; l++) {
            o = s + 1000 + 4000 * l
            printf "kernel %d %d 0 1\n", o, o + 500          # norm: 0.5 us
            printf "kernel %d %d 1 1\n", o + 500, o + 3000   # the wait: 2.5 us
            printf "kernel %d %d 2 1\n", o + 2900, o + 4000  # product: 1.1 us, 0.1 over the wait
        }
        printf "kernel %d %d 3 1\n", s + 40000, s + 43000
        printf "memcpy %d %d 4 DtoH 1\n", s + 44000, s + 44100
    }
}' >"$F" || fail "writing the trace"

"$G" bench trace "$F" --skip 2 >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "bench trace"; }
grep -q "^# guild bench trace: $F (model /m/x.gguf, 8 layers): 8 step(s) of 1 row(s) after 2 skipped, of 10 such and 12 step requests; 312 records$" "$T/out" ||
    { cat "$T/out"; fail "the header"; }
grep -q "^step wall (host, around the forward call): median 50.0 us" "$T/out" || { cat "$T/out"; fail "the wall"; }
# the union a layer: 0.5 + 2.5 + 1.0 = 4.0 us; without the wait 0.5 + 1.0 (the product's part past it)
grep -q "^busy a layer: 4.00 us (the busy us of the 3 kernel name(s) launched at least 8/4 times a step" "$T/out" ||
    { cat "$T/out"; fail "busy a layer"; }
grep -q "^dense busy a layer: 1.50 us (the same without 1 kernel name(s): the routed experts', \"expert...\", and the exchange's wait, \"xchg_wait...\")" "$T/out" ||
    { cat "$T/out"; fail "dense busy a layer"; }
grep -q "^memcpy DtoH" "$T/out" || { cat "$T/out"; fail "the copies"; }
# --steps and the default skip (8): 2 steps left
"$G" bench trace "$F" --steps 5 >"$T/out" 2>&1 || { cat "$T/out"; fail "bench trace --steps"; }
grep -q ": 2 step(s) of 1 row(s) after 8 skipped, of 10 such" "$T/out" || { cat "$T/out"; fail "the default skip"; }
# the prompt's pass, and --layers 4: the LM head (once a step) now counts as a layer's, (8 * 4.0 + 3.0) / 4
"$G" bench trace "$F" --tokens 512 --skip 0 --layers 4 >"$T/out" 2>&1 || { cat "$T/out"; fail "--tokens 512"; }
grep -q "(model /m/x.gguf, 4 layers): 1 step(s) of 512 row(s) after 0 skipped, of 1 such" "$T/out" ||
    { cat "$T/out"; fail "the prompt's pass"; }
grep -q "^busy a layer: 8.75 us (the busy us of the 4 kernel name(s) launched at least 4/4 times" "$T/out" ||
    { cat "$T/out"; fail "busy a layer over 4"; }

# refused: no such steps, a malformed trace, no file, bad flags
"$G" bench trace "$F" --tokens 3 >"$T/out" 2>&1 && fail "--tokens 3 accepted"
grep -q "no served forward pass of 3 row(s) past the first 8 (it has 0 such, of 12 step requests)" "$T/out" ||
    { cat "$T/out"; fail "the no-steps message"; }
sed 's/^kernel 1000 1500 0 1$/kernel 1000 1500 9 1/' "$F" >"$T/bad.trace"
"$G" bench trace "$T/bad.trace" >"$T/out" 2>&1 && fail "a malformed trace accepted"
grep -q "$T/bad.trace:10: a kernel record of name 9 (4 names)" "$T/out" || { cat "$T/out"; fail "the malformed message"; }
"$G" bench trace "$T/none.trace" >"$T/out" 2>&1
[ $? -eq 1 ] || fail "a missing file: exit status"
grep -q "none.trace: No such file" "$T/out" || { cat "$T/out"; fail "the missing-file message"; }
"$G" bench trace >"$T/out" 2>&1
[ $? -eq 2 ] || fail "no file: exit status"
"$G" bench trace "$F" --skip -1 >"$T/out" 2>&1
[ $? -eq 2 ] || { cat "$T/out"; fail "--skip -1: exit status"; }

# the flags that ask for a trace
"$G" bench run -m "$T/none.gguf" --backend cpu --gpu-prof "$T/x.trace" >"$T/out" 2>&1
[ $? -eq 2 ] || fail "--gpu-prof with the cpu backend: exit status"
grep -q "gpu-prof traces the cuda backend's device, not --backend cpu" "$T/out" || { cat "$T/out"; fail "backend message"; }
W=$B/guild-gpu-worker
if [ -x "$W" ]; then
    "$W" --connect "ipc://$T/none" --prof "" >"$T/out" 2>&1
    [ $? -eq 2 ] || { cat "$T/out"; fail "--prof '': exit status"; }
    grep -q -- "--prof: expected a file name" "$T/out" || { cat "$T/out"; fail "--prof '' message"; }
fi
if grep -q "^#define GUILD_HAVE_CUPTI 1" "$B/config.h" 2>/dev/null; then
    echo "note: this build traces (CUPTI): the refusals of a build without it are not run"
else
    "$G" bench run -m "$T/none.gguf" --backend cuda --gpu-prof "$T/x.trace" >"$T/out" 2>&1
    [ $? -eq 2 ] || { cat "$T/out"; fail "--gpu-prof without CUPTI: exit status"; }
    grep -q "this build cannot trace the GPU" "$T/out" || { cat "$T/out"; fail "the no-CUPTI message"; }
    if [ -x "$W" ]; then
        "$W" --connect "ipc://$T/none" --prof "$T/x.trace" >"$T/out" 2>&1
        [ $? -eq 1 ] || { cat "$T/out"; fail "guild-gpu-worker --prof without CUPTI: exit status"; }
        grep -q "this build cannot trace the GPU" "$T/out" || { cat "$T/out"; fail "the worker's no-CUPTI message"; }
    fi
    [ ! -e "$T/x.trace" ] || fail "a trace file written without a trace"
fi
echo "PASS: bench trace"
