#!/usr/bin/env bash
# Runs the CPU expert-kernel benchmark on the device machine (16 cores) and writes the results under $OUT.
#
# On this machine, from the repo root:
#   bash bench/device/pack.sh build-kern      # (or any build dir) binaries + their shared libraries -> .carry/
#   git describe --always --dirty --abbrev=12 > .carry/COMMIT   # provenance: the device copy has no .git
# then on the device (the `run` tool, carrying .carry):
#   bash bench/device/experts.sh
# Without .carry it tries to configure and build in build-device/ (needs the build dependencies there).
# Output: $OUT/device-experts.txt (provenance, bandwidth, every benchmark line) and $OUT/check_kernels.txt
# (bit-exactness of every SIMD level that CPU has, AMX included when present). Each step has its own time limit
# so that one slow step cannot lose the others' results; together they stay under the device's 10 minutes
# per command.
set -u
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$top/device-out}
mkdir -p "$out"
log=$out/device-experts.txt
cd "$top"

if [ -x .carry/bin/guild ]; then
    export LD_LIBRARY_PATH=$top/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    guild=.carry/bin/guild
    check=.carry/bin/tests/check_kernels
    checkp=.carry/bin/tests/check_pack
else
    echo "# no .carry/bin/guild: building in build-device/" | tee -a "$log"
    (autoreconf -fi >/dev/null 2>&1 || true)
    mkdir -p build-device
    (cd build-device && ../configure PYTHON=/usr/bin/python3 >/dev/null && make -j"$(nproc)" guild tests/check_kernels tests/check_pack >/dev/null) \
        >>"$log" 2>&1 || { echo "# build failed; see above" | tee -a "$log"; exit 1; }
    guild=build-device/guild
    check=build-device/tests/check_kernels
    checkp=build-device/tests/check_pack
fi

{
    echo "# experts.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# tree: $(cat "$top/.carry/COMMIT" 2>/dev/null || git -C "$top" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"  # the carried binaries' commit first: the device copy's git metadata can be stale
    lscpu 2>/dev/null | grep -E 'Model name|Socket|Core|Thread|NUMA|L3|Flags' | sed 's/^/# /' | cut -c1-400
    numactl -H 2>/dev/null | head -4 | sed 's/^/# /'
} >>"$log"

run() { # run LIMIT_SECONDS ARGS...: one step, its output appended to the log
    local limit=$1
    shift
    echo "## $*" >>"$log"
    timeout "$limit" "$@" >>"$log" 2>&1 || echo "## exit status $? (timeout $limit s)" >>"$log"
}

if [ -x "$check" ]; then
    timeout 120 "$check" >"$out/check_kernels.txt" 2>&1
    echo "# check_kernels: exit $? ($(tail -1 "$out/check_kernels.txt"))" >>"$log"
fi
if [ -x "${check%/*}/check_amx" ]; then
    timeout 120 "${check%/*}/check_amx" >"$out/check_amx.txt" 2>&1
    echo "# check_amx: exit $? ($(tail -1 "$out/check_amx.txt"))" >>"$log"
fi
if [ -x "$checkp" ]; then
    timeout 120 "$checkp" >"$out/check_pack.txt" 2>&1
    echo "# check_pack: exit $? ($(tail -1 "$out/check_pack.txt"))" >>"$log"
fi

threads=$(nproc)
run 40 "$guild" bench bw --gb 4
# the packed and the plain layouts of the experts (--layout), alternating: one token and prefill (512 tokens
# per layer, where the packed layout unpacks for the AMX kernels), then a verification window of 4 tokens
for round in 1 2; do
    for layout in plain packed; do
        run 90 "$guild" bench experts --type q4_K,iq4_xs,q6_K,q5_K --layout "$layout" --tokens 1 --shape qwen3-30b-a3b --gb 8 --prefill 512 --threads "$threads"
    done
done
for layout in plain packed; do
    run 60 "$guild" bench experts --type q4_K,iq4_xs --layout "$layout" --tokens 4 --shape qwen3-30b-a3b --gb 8 --prefill 0 --threads "$threads"
done
run 80 "$guild" bench experts --type q8_0,iq4_nl,q3_K,q2_K --tokens 1 --shape qwen3-30b-a3b --gb 8 --prefill 256 --threads "$threads"
echo "# done $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$log"
grep -E '^[A-Za-z0-9_]+ tokens=' "$log"
