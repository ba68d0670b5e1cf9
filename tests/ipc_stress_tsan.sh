#!/bin/sh
# The exchange protocol under ThreadSanitizer (tests/ipc_stress.c built with -fsanitize=thread, threads
# instead of processes): no data race may be reported on the correct protocol, and one must be reported
# when the dense side writes its inputs after ringing (--racy), which shows the detector is live.
# Skips (77) when the compiler cannot link -fsanitize=thread (see configure's summary).
bin="${GUILD_BUILDDIR:-.}/tests/ipc_stress_tsan"
if [ ! -x "$bin" ]; then
    echo "SKIP: $bin not built: the compiler does not link -fsanitize=thread"
    exit 77
fi
log="${TMPDIR:-/tmp}/ipc_stress_tsan.$$.log"
trap 'rm -f "$log"' EXIT
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}"

# a TSan runtime that cannot start here (e.g. an unsupported address-space layout) is a skip, not a failure
if ! "$bin" --threads --rounds 10 >"$log" 2>&1; then
    if grep -q "ThreadSanitizer: data race" "$log"; then
        cat "$log"; exit 1
    fi
    if grep -qi "ThreadSanitizer" "$log"; then
        echo "SKIP: the ThreadSanitizer runtime does not start here:"; cat "$log"; exit 77
    fi
    cat "$log"; exit 1
fi

set -e
"$bin" --threads --workers 1 --slots 1 --spin-ns 20000 --rounds 20000 --seconds 5
"$bin" --threads --workers 3 --slots 2 --spin-ns 2000 --rounds 5000 --seconds 5
"$bin" --threads --workers 2 --slots 1 --spin-ns 0 --rounds 5000 --seconds 5

set +e
"$bin" --threads --workers 1 --slots 1 --spin-ns 20000 --rounds 1000 --racy >"$log" 2>&1
rc=$?
if [ "$rc" -ne 66 ] || ! grep -q "ThreadSanitizer: data race" "$log"; then
    echo "FAIL: the deliberate race of --racy went unreported (exit $rc):"
    cat "$log"
    exit 1
fi
echo "ipc_stress_tsan: the deliberate race of --racy was reported, as it must be"
