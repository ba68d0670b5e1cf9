#!/usr/bin/env bash
# Copies the device machine's CUDA binary tools (cuobjdump, nvdisasm) and the libraries they load from outside
# glibc into $OUT/cuda-tools, for reading machine code on a machine without the toolkit's full install:
#   bash bench/device/tools-out.sh
set -u
o=${OUT:-/tmp/guild-out}/cuda-tools
mkdir -p "$o"
for t in cuobjdump nvdisasm; do
    p=$(command -v "$t" || ls /usr/local/cuda/bin/"$t" 2> /dev/null)
    [ -n "$p" ] || { echo "$t: not found"; continue; }
    cp -L "$p" "$o/"
    ldd "$p" | awk '/=> \//{print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64)\.' |
        while read -r l; do cp -L "$l" "$o/"; done
    echo "$t: $p ($("$p" --version 2>&1 | tail -n 1))"
done
ls -la "$o"
