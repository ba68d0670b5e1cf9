#!/bin/sh
# The source tree's map (issue 13), checked so that it stays true: which folders may include which, no file
# past the size where one idea has become several, and a README a user reads in five minutes.
#   - core/ includes nothing of the process folders (coordinator, gpu-worker, cpu-expert-worker, stager) nor
#     of ipc/, tools/, bench/;
#   - nothing in gpu-worker/, cpu-expert-worker/, stager/ or ipc/ includes coordinator/;
#   - gpu-worker/ and cpu-expert-worker/ include nothing of each other, nor gpu-worker/ and stager/;
#   - no top-level pipeline/;
#   - no source file (.c .h .cu .cuh .py .sh .am .proto) over 1,500 lines;
#   - README.md under 12,000 characters, starting (after its title) with the two quickstart commands.
set -u
top="${GUILD_SRCDIR:-$(dirname "$0")/..}"
cd "$top" || exit 99
fail=0

# forbid FROM-DIRS TO-PREFIX...: no file under FROM-DIRS includes a header under any TO-PREFIX.
forbid() {
    from=$1
    shift
    for to in "$@"; do
        hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"$to/" $from 2>/dev/null)
        if [ -n "$hits" ]; then
            echo "FAIL: $from includes $to/:"
            echo "$hits" | sed 's/^/    /'
            fail=1
        fi
    done
}

forbid core coordinator gpu-worker cpu-expert-worker stager ipc tools bench
for d in gpu-worker cpu-expert-worker stager ipc; do
    forbid $d coordinator
done
forbid gpu-worker cpu-expert-worker stager
forbid cpu-expert-worker gpu-worker
forbid stager gpu-worker

if [ -e pipeline ]; then
    echo "FAIL: a top-level pipeline/ exists again"
    fail=1
fi

big=$(find . -path ./build -prune -o -path './build-*' -prune -o -path ./_build -prune -o -path ./.git -prune \
    -o -path ./bench/results -prune \
    -o -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.py' -o -name '*.sh' \
    -o -name '*.am' -o -name '*.proto' \) -print | while read -r f; do
    n=$(wc -l <"$f")
    [ "$n" -gt 1500 ] && echo "    $f: $n lines"
done)
if [ -n "$big" ]; then
    echo "FAIL: source files over 1,500 lines:"
    echo "$big"
    fail=1
fi

size=$(wc -c <README.md)
if [ "$size" -ge 12000 ]; then
    echo "FAIL: README.md is $size characters (under 12,000 wanted: the rest belongs in docs/)"
    fail=1
fi
# The first code block holds the two commands.
block=$(awk '/^```/{n++; next} n==1' README.md)
for cmd in "bash tools/quickstart.sh run" "bash tools/quickstart.sh test"; do
    case "$block" in
    *"$cmd"*) ;;
    *)
        echo "FAIL: README.md's first code block lacks '$cmd'"
        fail=1
        ;;
    esac
done
exit $fail
