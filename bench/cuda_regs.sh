#!/bin/sh
# What ptxas gives each kernel of a .cu file, and the blocks of it an SM holds at once: for reasoning about a launch's
# shape (its blocks in one wave or not) on a machine without a GPU, where nvcc alone is.
#   bench/cuda_regs.sh [--threads N] [--match TEXT] [--build DIR] FILE.cu [NVCC FLAGS...]
#   bench/cuda_regs.sh [--threads N] [--match TEXT] --log FILE   (a saved `-Xptxas -v` log instead of compiling)
# FILE.cu is compiled as the build DIR (default build/, configured with CUDA) compiles its kernels, its NVCC and
# GUILD_NVCCFLAGS asked of its Makefile, with -Xptxas -v; further flags follow (defines, say). One line a
# kernel whose mangled name contains TEXT: registers, barriers, static shared memory, spill bytes, and the blocks of N
# threads (default 128) an sm_90 SM holds by its limits (65,536 registers allocated 256 a warp, 64 warps, 32 blocks,
# 228 KiB of shared memory less 1 KiB a block; dynamic shared memory is not in the log and not counted), times 132
# SMs (the H100 SXM's and the H200's). Names are demangled where c++filt is found.
set -u
threads=128 match="" build="" log=""
usage() { echo "usage: bench/cuda_regs.sh [--threads N] [--match TEXT] [--build DIR] FILE.cu [FLAGS...]" \
    "| [--threads N] [--match TEXT] --log FILE" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    --threads) [ $# -ge 2 ] || usage; threads=$2; shift 2 ;;
    --match) [ $# -ge 2 ] || usage; match=$2; shift 2 ;;
    --build) [ $# -ge 2 ] || usage; build=$2; shift 2 ;;
    --log) [ $# -ge 2 ] || usage; log=$2; shift 2 ;;
    --help | -h) usage ;;
    -*) echo "cuda_regs: unknown option $1" >&2; usage ;;
    *) break ;;
    esac
done
case $threads in '' | *[!0-9]*) echo "cuda_regs: --threads wants a number of threads, 1 to 1024 (got '$threads')" >&2
    exit 2 ;; esac
if [ "$threads" -lt 1 ] || [ "$threads" -gt 1024 ]; then
    echo "cuda_regs: --threads wants 1 to 1024 threads (got $threads)" >&2
    exit 2
fi
if [ -z "$log" ]; then
    [ $# -ge 1 ] || usage
    src=$1
    shift
    [ -f "$src" ] || { echo "cuda_regs: no file $src" >&2; exit 2; }
    src=$(cd "$(dirname "$src")" && pwd)/$(basename "$src")
    build=${build:-$(dirname "$0")/../build}
    # the build's own compiler and kernel flags
    # shellcheck source=bench/cuda_build_cmd.sh
    . "$(dirname "$0")/cuda_build_cmd.sh"
    cuda_build_cmd cuda_regs "$build"
    tmp=$(mktemp -d) || exit 1
    trap 'rm -rf "$tmp"' EXIT
    log=$tmp/ptxas.log
    # shellcheck disable=SC2086 # cmd: the Makefile's words
    if ! (cd "$build" && $cmd -Xptxas -v "$@" -c "$src" -o "$tmp/k.o") > "$log" 2>&1; then
        cat "$log" >&2
        echo "cuda_regs: nvcc failed on $src" >&2
        exit 1
    fi
elif [ ! -f "$log" ]; then
    echo "cuda_regs: no log $log" >&2
    exit 2
fi
out=$(awk -v N="$threads" -v M="$match" '
function flush() {
    if (name == "" || (M != "" && index(name, M) == 0)) { name = ""; return }
    warps = int((N + 31) / 32)
    rw = int((regs * 32 + 255) / 256) * 256            # a warp takes registers 256 at a time
    by_regs = rw ? int(int(65536 / rw) / warps) : 32   # warps the registers hold, in whole blocks
    by_warps = int(64 / warps)
    by_smem = int(233472 / (smem + 1024))
    b = by_regs; if (by_warps < b) b = by_warps; if (by_smem < b) b = by_smem; if (b > 32) b = 32
    lim = b == by_regs ? "registers" : b == by_warps ? "warps" : b == by_smem ? "shared memory" : "32 blocks"
    printf "%s\t%d regs, %d barriers, %d B smem, spills %d/%d B; %d blocks of %d threads an SM (%s), %d on 132 SMs\n",
        name, regs, bars, smem, sst, sld, b, N, lim, b * 132
    found++
    name = ""
}
/Compiling entry function/ { flush(); name = $0; sub(/.*function ./, "", name); sub(/. for .*/, "", name); regs = bars = smem = sst = sld = 0 }
# the properties of the kernel itself, not of a device function it calls (listed under that name)
/Function properties for/ { own = name != "" && $NF == name }
/bytes spill stores/ && own { for (i = 1; i <= NF; i++) { if ($(i+1) == "bytes" && $(i+2) == "spill") { if ($(i+3) == "stores,") sst = $i; else sld = $i } } }
/Used [0-9]+ registers/ {
    for (i = 1; i <= NF; i++) {
        if ($i == "Used") regs = $(i+1)
        if ($(i+1) ~ /^barriers/) bars = $i
        if ($(i+1) == "bytes" && $(i+2) ~ /^smem/) smem = $i
    }
    flush()
}
END { flush(); if (!found) { print "cuda_regs: no kernel" (M != "" ? " matching " M : "") " in the log" > "/dev/stderr"; exit 1 } }
' "$log") || exit 1
if command -v c++filt > /dev/null 2>&1; then printf '%s\n' "$out" | c++filt; else printf '%s\n' "$out"; fi
