#!/bin/sh
# The sm_90 machine code of a .cu file's kernels, on a machine without a GPU or the toolkit's own disassembler: for
# reading a kernel's layout (where a path's code lies, how many instructions a loop takes) before a device call.
#   bench/cuda_sass.sh [--match TEXT] [--build DIR] [--nvdisasm PATH] [--summary] FILE.cu [NVCC FLAGS...]
#   bench/cuda_sass.sh [--match TEXT] [--summary] --listing FILE   (a saved `nvdisasm -c` listing instead)
# FILE.cu is compiled to an sm_90 cubin with the build DIR's (default build/, configured with CUDA) NVCC and
# GUILD_NVCCFLAGS, further flags following (defines, say). The functions whose mangled name contains TEXT are
# printed (all without --match); --summary prints one line a function instead: its code's bytes and the
# instructions shown.
# The disassembler: --nvdisasm PATH, else nvdisasm on PATH or beside nvcc. Where the toolkit has none, an older one
# serves: Debian bookworm's non-free nvidia-cuda-toolkit (11.8) holds usr/bin/nvdisasm (`apt-get download
# nvidia-cuda-toolkit` with the non-free component in a sources file, then `dpkg -x` it anywhere). Its ELF reader
# predates the cubins of CUDA 12.8 on (ELF ABI version 8), so the cubin's header is rewritten to the older form
# (ABI 7, the sm_90 flags) first; the code is the same. It leaves out the instructions it does not know (VIADD
# among them, so a loop's counter steps may be missing): the counts are a floor, and the addresses show the gaps.
set -u
match="" build="" nvd="" summary=0 listing=""
usage() { echo "usage: bench/cuda_sass.sh [--match TEXT] [--build DIR] [--nvdisasm PATH] [--summary] FILE.cu" \
    "[FLAGS...] | [--match TEXT] [--summary] --listing FILE" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    --match) [ $# -ge 2 ] || usage; match=$2; shift 2 ;;
    --build) [ $# -ge 2 ] || usage; build=$2; shift 2 ;;
    --nvdisasm) [ $# -ge 2 ] || usage; nvd=$2; shift 2 ;;
    --summary) summary=1; shift ;;
    --listing) [ $# -ge 2 ] || usage; listing=$2; shift 2 ;;
    --help | -h) usage ;;
    -*) echo "cuda_sass: unknown option $1" >&2; usage ;;
    *) break ;;
    esac
done
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
if [ -n "$listing" ]; then
    [ -f "$listing" ] || { echo "cuda_sass: no listing $listing" >&2; exit 2; }
    cp "$listing" "$tmp/k.sass"
else
    [ $# -ge 1 ] || usage
    src=$1
    shift
    [ -f "$src" ] || { echo "cuda_sass: no file $src" >&2; exit 2; }
    src=$(cd "$(dirname "$src")" && pwd)/$(basename "$src")
    build=${build:-$(dirname "$0")/../build}
    # shellcheck source=bench/cuda_build_cmd.sh
    . "$(dirname "$0")/cuda_build_cmd.sh"
    cuda_build_cmd cuda_sass "$build"
    nvcc=${cmd%% *}
    if [ -z "$nvd" ]; then
        nvd=$(command -v nvdisasm 2> /dev/null || true)
        [ -n "$nvd" ] || nvd=$(dirname "$nvcc")/nvdisasm
    fi
    if [ ! -x "$nvd" ]; then
        echo "cuda_sass: no nvdisasm at '$nvd'; give --nvdisasm PATH (the header says where to get one)" >&2
        exit 2
    fi
    command -v python3 > /dev/null 2>&1 ||
        { echo "cuda_sass: python3 is needed to read the cubin's header" >&2; exit 2; }
    # The Makefile's flags less its -gencode pairs (a cubin is one architecture's): sm_90, as the device machine's GPUs.
    flags=$(echo "$cmd" | sed -e 's/^[^ ]* //' -e 's/-gencode [^ ]*//g')
    # shellcheck disable=SC2086 # flags: the Makefile's words
    if ! (cd "$build" && "$nvcc" $flags -arch=sm_90 "$@" -cubin -o "$tmp/k.cubin" "$src") > "$tmp/nvcc.log" 2>&1; then
        cat "$tmp/nvcc.log" >&2
        echo "cuda_sass: nvcc failed on $src" >&2
        exit 1
    fi
    python3 - "$tmp/k.cubin" "$tmp/k7.cubin" << 'EOF' || exit 1
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read())
if d[:4] != b'\x7fELF' or d[4] != 2:
    sys.exit('cuda_sass: the cubin is not a 64-bit ELF file')
if d[8] >= 8:  # ELF ABI 8: the architecture in e_flags' second byte; the older form wants it in the first and third
    sm = (struct.unpack_from('<I', d, 48)[0] >> 8) & 0xff
    d[8] = 7
    struct.pack_into('<I', d, 48, sm | 0x500 | sm << 16)  # EF_CUDA_TEXMODE_UNIFIED | EF_CUDA_64BIT_ADDRESS
open(sys.argv[2], 'wb').write(d)
EOF
    if ! "$nvd" -c "$tmp/k7.cubin" > "$tmp/k.sass" 2> "$tmp/nvd.log"; then
        cat "$tmp/nvd.log" >&2
        echo "cuda_sass: $nvd could not read the cubin" >&2
        exit 1
    fi
fi
awk -v M="$match" -v S="$summary" '
function hex(h,    i, v) {
    v = 0
    for (i = 1; i <= length(h); i++)
        v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
    return v
}
function flush() {
    if (name != "" && (M == "" || index(name, M))) {
        found++
        if (S)
            printf "%s\t%d bytes, %d instructions shown\n", name, last + 16, n
    }
    name = ""
}
/^\/\/-+ \.text\./ { flush(); name = $0; sub(/^\/\/-+ \.text\./, "", name); sub(/ -+$/, "", name); n = 0; last = -16
    on = M == "" || index(name, M); if (on && !S) print; next }
/^\t\.section/ && !/\.section\t\.text\./ { flush(); on = 0; next }
name != "" && /\/\*[0-9a-f]+\*\// { n++; a = $0; sub(/.*\/\*/, "", a); sub(/\*\/.*/, "", a); last = hex(a) }
on && !S && name != "" { print }
END { flush(); exit found ? 0 : 3 }' "$tmp/k.sass"
st=$?
if [ "$st" -eq 3 ]; then
    # shellcheck disable=SC2016 # the quotes are the message's; $match expands (double quotes around it all)
    echo "cuda_sass: no function${match:+ whose name contains '$match'} in the listing" >&2
    exit 1
fi
exit "$st"
