#!/bin/sh
# The global memory accesses each kernel makes before its griddepcontrol.wait (SASS ACQBULK), read off the CUDA
# objects' machine code (cuobjdump -sass), against the reviewed list tests/cuda/pdl_loads.txt.
#
# Before its wait a kernel launched with programmatic dependent launch runs beside the kernel before it: it may
# read only what no kernel of the step writes (weights), or a hint it checks again after the wait. The source's
# order is not the machine code's: ptxas may move a non-coherent load (ld.global.nc, what nvcc makes of a
# `const T *__restrict__` parameter) above the wait, since .nc promises memory that does not change while the
# kernel runs. It did so with the experts' ids in a variant of expert_pair_kernel (session 53): read before the
# router had written them, the step used the layer before's experts. The source looked right and no launch order
# tried by hand would show it; this list does: a kernel whose accesses before its wait differ from the reviewed
# ones fails here, on any machine with the toolkit (no GPU needed). After a change that adds, moves or removes such
# an access, read the kernel's machine code and its source, and where every access before the wait is a weight or
# a checked hint, update the list: tests/cuda/pdl_loads.sh --update.
#
# Counted: LDG, STG, generic LD/ST, LDGSTS (cp.async), atomics and reductions, bulk and tensor copies, in program
# order before the kernel's first ACQBULK (an access in a branch that waits later is not seen; the control flow
# graph would see paths no run takes, such as the decode attention's, which waits in one of two arms). L2 prefetches
# (CCTL.E.PF2, bulk prefetch) are hints, not counted. SKIP (77) without cuobjdump or without the CUDA objects.
# --binary FILE reads a linked program instead (guild-gpu-worker holds every kernel; a device pack has no objects:
# bench/device/alltests.sh) and compares kernels and accesses without the objects' names.
#   tests/cuda/pdl_loads.sh [--update] [--cuobjdump PATH] [--binary FILE]
set -u
B=${GUILD_BUILDDIR:-.}
S=${GUILD_SRCDIR:-$(dirname "$0")/../..}
list=$S/tests/cuda/pdl_loads.txt
dump=${CUOBJDUMP:-}
update=0
binary=
while [ $# -gt 0 ]; do
    case $1 in
    --update) update=1 ;;
    --cuobjdump)
        [ $# -ge 2 ] || { echo "pdl_loads.sh: --cuobjdump needs a path" >&2; exit 2; }
        dump=$2
        shift ;;
    --binary)
        [ $# -ge 2 ] || { echo "pdl_loads.sh: --binary needs a file" >&2; exit 2; }
        binary=$2
        shift ;;
    *) echo "pdl_loads.sh: unknown argument '$1' (--update, --cuobjdump PATH, --binary FILE)" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$dump" ] || dump=$(command -v cuobjdump 2> /dev/null || true)
if [ -z "$dump" ] || [ ! -x "$dump" ]; then
    echo "SKIP: no cuobjdump (configure finds it beside nvcc; --cuobjdump PATH)"
    exit 77
fi
if [ -n "$binary" ]; then
    [ $update -eq 0 ] || { echo "pdl_loads.sh: --update reads the build's objects, not --binary" >&2; exit 2; }
    [ -f "$binary" ] || { echo "pdl_loads.sh: --binary $binary: no such file" >&2; exit 2; }
    objs=$binary
else
    objs=$(ls "$B"/gpu-worker/dense/cuda/*.cuda.o 2> /dev/null)
fi
if [ -z "$objs" ]; then
    echo "SKIP: no CUDA objects under $B/gpu-worker/dense/cuda (a build without CUDA)"
    exit 77
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# One object: "OBJECT<TAB>KERNEL<TAB>OPCODE=N,..." for each kernel that waits and accesses memory before it, and
# "OBJECT<TAB>KERNEL<TAB>no-wait" for each kernel without a wait (launched with programmatic dependent launch, such
# a kernel would run beside the kernel before it from start to end: a new one is listed for review too).
scan() {
    "$dump" -sass "$1" | awk -v obj="$(basename "$1" .cuda.o)" '
        function flush(   k, s, n, i, j, keys) {
            if (fn != "" && !waited)
                print obj "\t" fn "\tno-wait"
            if (fn != "" && waited && npre > 0) {
                n = 0
                for (k in pre) keys[++n] = k
                for (i = 2; i <= n; i++) { # insertion sort: the opcodes in one order
                    k = keys[i]
                    for (j = i - 1; j >= 1 && keys[j] > k; j--) keys[j + 1] = keys[j]
                    keys[j + 1] = k
                }
                s = ""
                for (i = 1; i <= n; i++) s = s (i > 1 ? "," : "") keys[i] "=" pre[keys[i]]
                print obj "\t" fn "\t" s
            }
            delete pre
            npre = 0; waited = 0; before = 1
        }
        /Function : / { flush(); fn = $3; next }
        /^ *\/\*[0-9a-f]+\*\// {
            line = $0
            sub(/^ *\/\*[0-9a-f]+\*\/ */, "", line)
            sub(/ *;.*/, "", line)
            split(line, f, " ")
            op = f[1]
            if (op ~ /^@/) op = f[2]
            if (op == "ACQBULK") { waited = 1; before = 0; next }
            if (!before) next
            if (op ~ /^(LDG|STG|LDGSTS|ATOMG|REDG|UBLKCP|UTMALDG|UTMASTG|UTMAREDG)/ && op !~ /^LDGDEPBAR/ ||
                op ~ /^(LD|ST|ATOM|RED)\.E/) {
                pre[op]++
                npre++
            }
        }
        END { flush() }'
}
for o in $objs; do
    # the pipe's status is awk's: cuobjdump's failure shows as its message on stderr
    (t=$tmp/$(basename "$o")
        if ! scan "$o" > "$t.txt" 2> "$t.err" || [ -s "$t.err" ]; then
            echo "cuobjdump failed on $o: $(head -c 300 "$t.err")" > "$t.fail"
        fi) &
done
wait
if ls "$tmp"/*.fail > /dev/null 2>&1; then
    cat "$tmp"/*.fail
    echo "FAIL: the machine code could not be read"
    exit 1
fi
# a program's kernels come without their objects' names: compared as kernel and accesses only
cols=1-
[ -n "$binary" ] && cols=2-
cut -f"$cols" "$tmp"/*.txt | LC_ALL=C sort > "$tmp/now"
if [ $update -eq 1 ]; then
    {
        echo "# The reviewed global accesses before each kernel's wait (tests/cuda/pdl_loads.sh; --update writes it):"
        echo "# object, kernel (mangled), opcode=count; no-wait: a kernel without a wait (never launched with"
        echo "# programmatic dependent launch). A kernel that waits and is not listed accesses nothing before its wait."
        cat "$tmp/now"
    } > "$list"
    echo "wrote $list: $(wc -l < "$tmp/now") kernels"
    exit 0
fi
if [ ! -f "$list" ]; then
    echo "FAIL: no reviewed list $list (tests/cuda/pdl_loads.sh --update writes one)"
    exit 1
fi
grep -v '^#' "$list" | cut -f"$cols" | LC_ALL=C sort > "$tmp/ok"
early=$(grep -vc 'no-wait$' "$tmp/now")
nowait=$(grep -c 'no-wait$' "$tmp/now")
if cmp -s "$tmp/ok" "$tmp/now"; then
    what="$(echo "$objs" | wc -w) objects"
    [ -n "$binary" ] && what=$binary
    echo "PASS: $early kernels access memory before their wait and $nowait have no wait, each as reviewed ($what)"
    exit 0
fi
echo "FAIL: accesses before the wait differ from the reviewed list (< reviewed, > now):"
diff "$tmp/ok" "$tmp/now" | grep '^[<>]' | head -n 40
echo "Read each changed kernel's machine code ($dump -sass OBJECT) and its source: an access before ACQBULK that"
echo "the source places after pdl_begin/pdl_wait is a kernel's output read early (a coherent load, not a const"
echo "__restrict__ parameter, keeps it after the wait); only weights and checked hints belong before it."
exit 1
