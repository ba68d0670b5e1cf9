#!/bin/sh
# Short fuzz run of the GGUF reader, part of `make check` (the long run: tests/fuzz/README.md).
#  1. replays the seed corpus through the fuzz target built with the normal compiler (in the ASan/UBSan build
#     this is a sanitized replay);
#  2. when configure found libFuzzer, fuzzes for FUZZ_SECONDS (default 20) and prints the executions; new
#     inputs go to a scratch directory (the source tree may be read-only, as under distcheck); a crash leaves
#     its reproducer in tests/fuzz/ of the build directory. Without libFuzzer that part is reported as SKIP.
# The sanitizer build skips step 2: the libFuzzer binary is the same in both builds, one run is enough.
set -u
builddir=${GUILD_BUILDDIR:-.}
srcdir=${GUILD_SRCDIR:-.}
corpus=$srcdir/tests/fuzz/corpus-gguf
replay=$builddir/tests/fuzz/fuzz_gguf_replay
fuzzer=$builddir/tests/fuzz/fuzz_gguf
seconds=${FUZZ_SECONDS:-20}

"$replay" "$corpus" || { echo "FAIL: the fuzz target failed on the seed corpus ($corpus)"; exit 1; }

if [ "$("$replay" --sanitized)" = yes ]; then
    echo "sanitizer build: corpus replayed under ASan/UBSan; the libFuzzer run belongs to the normal build"
    exit 0
fi
if [ ! -x "$fuzzer" ]; then
    echo "SKIP: libFuzzer not available (configure: FUZZ_CC with -fsanitize=fuzzer); only the corpus was replayed"
    exit 77
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/fuzz_gguf.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
log=$scratch/log
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict="$srcdir/tests/fuzz/gguf.dict" -artifact_prefix="$builddir/tests/fuzz/crash-gguf-" \
    "$scratch" "$corpus" >"$log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -n 's/.*\(cov: [0-9]*\).*/\1/p')
if [ $rc -ne 0 ]; then
    tail -n 60 "$log"
    echo "FAIL: libFuzzer found a failure (reproducer: $builddir/tests/fuzz/crash-gguf-*;" \
        "replay it with $replay FILE)"
    exit 1
fi
echo "fuzz_gguf: ${execs:-?} executions in ${seconds} s (${rate:-?} exec/s), ${cov:-cov: ?}, $(ls "$scratch" | wc -l) new inputs"
exit 0
