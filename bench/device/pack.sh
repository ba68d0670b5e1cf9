#!/usr/bin/env bash
# Packs Guild's binaries and the shared libraries they need (other than glibc and the CUDA driver) into
# .carry/ so they can run on the device machine, which has no package registry. Usage, from the repo root:
#   bash bench/device/pack.sh BUILD_DIR
# then carry `.carry` and on the device: `export LD_LIBRARY_PATH=$PWD/.carry/lib; .carry/bin/guild ...`.
# .carry/ is ignored by git. Binaries built on Debian 12 (glibc 2.36) run on the device's Ubuntu 24.04 (2.39).
set -euo pipefail
build=${1:?usage: pack.sh BUILD_DIR}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest=$top/.carry
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"

# Every executable the build produced (programs and test programs), found by their ELF header.
while IFS= read -r f; do
    if head -c 4 "$f" | grep -q 'ELF'; then
        rel=${f#"$build"/}
        mkdir -p "$dest/bin/$(dirname "$rel")"
        cp "$f" "$dest/bin/$rel"
    fi
done < <(find "$build" -type f -perm -u+x ! -name '*.so*' ! -path '*/.libs/*' ! -name 'config.*' ! -name '*.sh')

# Their shared libraries, except the C library family and the CUDA driver (the device has its own).
skip='^(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|libcuda|libnvidia|linux-vdso|libgcc_s|libstdc\+\+)\.'
find "$dest/bin" -type f -print0 | xargs -0 ldd 2>/dev/null | awk '/=> \//{print $1" "$3}' | sort -u |
    while read -r name path; do
        [[ $name =~ $skip ]] && continue
        cp -L "$path" "$dest/lib/$name"
    done
# test scripts and python reference travel with the tree itself
du -sh "$dest" | awk '{print "device-pack: " $1 " in .carry"}'
