#!/bin/sh
# bench/cuda_sass.sh on a listing written here (no nvcc or nvdisasm needed): --summary's bytes and instructions a
# function (an instruction the disassembler left out shows as a gap in the addresses, not in the count), --match,
# one function's listing, and its refusals (a missing listing, no function matching, an unknown option).
set -u
. "$(dirname "$0")/../tests/test_lib.sh"
make_tmp
R=$S/bench/cuda_sass.sh

# two functions as `nvdisasm -c` prints them: a header line, the section, labels and instructions; the first with a
# gap at 0x0020 (an instruction the disassembler did not know), then the file's other sections
printf '%s\n' \
    '	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"' \
    '//--------------------- .text._Z5firstPf --------------------------' \
    '	.section	.text._Z5firstPf,"ax",@progbits' \
    '        /*0000*/                   LDC R1, c[0x0][0x28] ;' \
    '        /*0010*/                   S2R R0, SR_TID.X ;' \
    '.L_x_0:' \
    '        /*0030*/                   EXIT ;' \
    '//--------------------- .text._Z6secondPf --------------------------' \
    '	.section	.text._Z6secondPf,"ax",@progbits' \
    '        /*0000*/                   LDC R1, c[0x0][0x28] ;' \
    '        /*0010*/                   EXIT ;' \
    '        /*0020*/                   BRA 0x20;' \
    '	.section	.nv.shared._Z6secondPf,"aw",@nobits' \
    '        /*0000*/ .zero 16' > "$T/listing"

run() { # ARGS...: the program's stdout in $T/out, its stderr in $T/err, its exit status returned
    sh "$R" "$@" > "$T/out" 2> "$T/err"
}
run --summary --listing "$T/listing" || { cat "$T/err"; fail "--summary: exit status $?"; }
[ "$(wc -l < "$T/out")" -eq 2 ] || { cat "$T/out"; fail "--summary: not a line a function"; }
grep -qx '_Z5firstPf	64 bytes, 3 instructions shown' "$T/out" || { cat "$T/out"; fail "first: bytes or count"; }
grep -qx '_Z6secondPf	48 bytes, 3 instructions shown' "$T/out" ||
    { cat "$T/out"; fail "second: bytes or count (the shared section's line is not code)"; }
run --summary --match second --listing "$T/listing" || fail "--match second: exit status $?"
[ "$(cat "$T/out")" = '_Z6secondPf	48 bytes, 3 instructions shown' ] || { cat "$T/out"; fail "--match second"; }
run --match first --listing "$T/listing" || fail "--match first: exit status $?"
grep -q 'S2R R0, SR_TID.X' "$T/out" || { cat "$T/out"; fail "first's listing lacks its code"; }
grep -q 'secondPf' "$T/out" && { cat "$T/out"; fail "first's listing holds second's"; }
grep -q '^\.L_x_0:' "$T/out" || fail "first's listing lacks its label"

# refusals: a missing listing, no function matching, an unknown option; each says why
run --listing "$T/none" && fail "a missing listing accepted"
grep -q "no listing" "$T/err" || { cat "$T/err"; fail "a missing listing: no reason"; }
run --match third --listing "$T/listing" && fail "no function matching: exit status 0"
grep -q "no function whose name contains 'third'" "$T/err" || { cat "$T/err"; fail "no match: no reason"; }
run --bogus && fail "an unknown option accepted"
grep -q "unknown option --bogus" "$T/err" || { cat "$T/err"; fail "an unknown option: no reason"; }
echo "ok: cuda_sass.sh on a listing"
