#!/bin/sh
# bench/cuda_regs.sh on a ptxas log written here (no nvcc needed): each kernel's registers, barriers, shared memory
# and spills as the log says them, the blocks an SM holds by whichever limit binds (registers, warps, shared memory,
# 32 blocks) at the threads asked, --match, and its refusals (a bad --threads, a missing log, no kernel matching).
# With a build configured with CUDA, a small kernel of the tree compiled as it compiles kernels also gives a line.
set -u
. "$(dirname "$0")/../tests/test_lib.sh"
make_tmp
R=$S/bench/cuda_regs.sh

cat > "$T/log" << 'EOF'
ptxas info    : 33920 bytes gmem
ptxas info    : Compiling entry function '_Z8kern_fortyPf' for 'sm_90'
ptxas info    : Function properties for _Z8kern_fortyPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers
ptxas info    : Compile time = 1.0 ms
ptxas info    : Compiling entry function '_Z9kern_smemPf' for 'sm_90'
ptxas info    : Function properties for _Z9kern_smemPf
    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 24 registers, used 2 barriers, 49152 bytes smem
ptxas info    : Compiling entry function '_Z10kern_smallPf' for 'sm_90'
ptxas info    : Function properties for _Z6helperv
    32 bytes stack frame, 40 bytes spill stores, 40 bytes spill loads
ptxas info    : Function properties for _Z10kern_smallPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
EOF

line() { # THREADS NAME: the report's line of kernel NAME at THREADS threads
    sh "$R" --threads "$1" --match "$2" --log "$T/log" > "$T/out" 2> "$T/err" ||
        { cat "$T/err"; fail "--threads $1 --match $2: exit status $?"; }
    [ "$(wc -l < "$T/out")" -eq 1 ] || { cat "$T/out"; fail "--match $2: not one line"; }
    cat "$T/out"
}
want() { # THREADS NAME TEXT: the line holds TEXT
    l=$(line "$1" "$2") || { echo "$l"; exit 1; }
    case $l in *"$3"*) ;; *) fail "--threads $1 --match $2: '$l' lacks '$3'" ;; esac
}
# 40 registers: 1,280 a warp, 51 warps of registers, 12 blocks of 4 warps (registers bind); 6 of 8 warps
want 128 kern_forty "40 regs, 1 barriers, 0 B smem, spills 0/0 B; 12 blocks of 128 threads an SM (registers), 1584 on 132 SMs"
want 256 kern_forty "6 blocks of 256 threads an SM (registers), 792 on 132 SMs"
# 48 KiB of static shared memory a block (+1 KiB reserved): 4 blocks of the 228 KiB, before registers or warps
want 128 kern_smem "24 regs, 2 barriers, 49152 B smem, spills 12/16 B; 4 blocks of 128 threads an SM (shared memory)"
# 8 registers: 1,024 threads a block hold 2 blocks by warps (64 of 32 each), registers allow 8; the spills of a
# device function it calls are not its own
want 1024 kern_small "8 regs, 0 barriers, 0 B smem, spills 0/0 B; 2 blocks of 1024 threads an SM (warps), 264 on 132 SMs"
# 32 threads a block: 64 warps would be 64 blocks, the SM's 32-block limit binds
want 32 kern_small "32 blocks of 32 threads an SM (32 blocks)"
# every kernel without --match, in the log's order
sh "$R" --log "$T/log" > "$T/out" 2> "$T/err" || fail "no --match: exit status $?"
[ "$(grep -c 'blocks of 128 threads' "$T/out")" -eq 3 ] || { cat "$T/out"; fail "no --match: not 3 kernels"; }

# refusals
for bad in 0 1025 x12 ""; do
    sh "$R" --threads "$bad" --log "$T/log" > "$T/out" 2> "$T/err"
    st=$?
    [ "$st" -eq 2 ] || fail "--threads '$bad': exit status $st, expected 2"
    grep -q -- "--threads wants" "$T/err" || fail "--threads '$bad': not named"
done
sh "$R" --log "$T/nothing" > "$T/out" 2> "$T/err"
st=$?
[ "$st" -eq 2 ] && grep -q "no log" "$T/err" || fail "a missing log: exit status $st, '$(cat "$T/err")'"
sh "$R" --match kern_none --log "$T/log" > "$T/out" 2> "$T/err"
st=$?
[ "$st" -eq 1 ] && grep -q "no kernel matching kern_none" "$T/err" || fail "no match: exit status $st"
sh "$R" --frobnicate > "$T/out" 2> "$T/err"
[ $? -eq 2 ] && grep -q "unknown option --frobnicate" "$T/err" || fail "an unknown option: not refused"

# with a build configured with CUDA: the tree's add kernels compiled as it compiles them give their lines; without,
# the refusal that says so
if grep -Eq '^NVCC = .+' "$B/Makefile" 2> /dev/null; then
    sh "$R" --build "$B" --match add "$S/gpu-worker/dense/cuda/add.cu" > "$T/out" 2> "$T/err" ||
        { cat "$T/err"; fail "add.cu: exit status $?"; }
    grep -q "regs, .* blocks of 128 threads an SM" "$T/out" || { cat "$T/out"; fail "add.cu: no kernel line"; }
else
    sh "$R" --build "$B" "$S/gpu-worker/dense/cuda/add.cu" > "$T/out" 2> "$T/err"
    st=$?
    [ "$st" -eq 2 ] && grep -q "has no nvcc" "$T/err" || fail "a build without CUDA: exit status $st, '$(cat "$T/err")'"
    echo "cuda_regs_cli: the build has no nvcc; the compiling path not run"
fi
echo "cuda_regs_cli: ok"
