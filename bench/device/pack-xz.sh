#!/usr/bin/env bash
# Packs a worktree's build for one device call, small enough to carry beside the tree (sessions 40-43's form):
#   PACK_FILES="guild guild-cpu-worker ... tests/cuda/check_cuda_fused" bash bench/device/pack-xz.sh WORKTREE OUTDIR
# WORKTREE/build's PACK_FILES (paths in the build; default: the programs, guild-cuda-prof, tests/mk_mtp_oracle and
# every CUDA test) into bin/, the directories /tmp/p40/var* and /tmp/p40/base* (other builds' binaries, flat, made
# by hand; base/COMMIT, the base's commit, becomes BASE_COMMIT) beside it, the libraries they load (not glibc's, the
# driver's or the C++ runtime's) into lib/, the worktree's commit into COMMIT; stripped, xz -1 with a large
# dictionary, as OUTDIR/c.tar.xz (carry OUTDIR; on the device: `mkdir -p /tmp/c && tar -xJf OUTDIR/c.tar.xz -C
# /tmp/c`, then C=/tmp/c for the bench/device/lib.sh scripts).
set -euo pipefail
wt=$1 out=$2
rm -rf /tmp/p40/c && mkdir -p /tmp/p40/c/bin /tmp/p40/c/lib
cd "$wt/build"
for f in ${PACK_FILES:-guild guild-cpu-worker guild-gpu-worker guild-stager tools/guild-mkmodel bench/guild-cuda-prof tests/mk_mtp_oracle tests/cuda/*}; do
    [ -f "$f" ] && [ -x "$f" ] && head -c 4 "$f" | grep -q ELF || continue
    mkdir -p "/tmp/p40/c/bin/$(dirname "$f")"
    cp "$f" "/tmp/p40/c/bin/$f"
done
for d in /tmp/p40/var* /tmp/p40/base*; do [ -d "$d" ] && cp -r "$d" /tmp/p40/c/; done
find /tmp/p40/c -type f -perm -u+x | while read -r f; do head -c 4 "$f" | grep -q ELF && strip "$f" 2> /dev/null; done || true
skip='^(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|libcuda|libnvidia|linux-vdso|libgcc_s|libstdc\+\+)\.'
find /tmp/p40/c -type f -perm -u+x -print0 | xargs -0 ldd 2> /dev/null | awk '/=> \//{print $1" "$3}' | sort -u |
    while read -r name path; do
        [[ $name =~ $skip ]] && continue
        cp -L "$path" "/tmp/p40/c/lib/$name"
    done
git -C "$wt" rev-parse --short=12 HEAD > /tmp/p40/c/COMMIT
# the base build's commit, written by hand beside its binaries (/tmp/p40/base/COMMIT), for lib.sh's setup
if [ -f /tmp/p40/c/base/COMMIT ]; then mv /tmp/p40/c/base/COMMIT /tmp/p40/c/BASE_COMMIT; fi
mkdir -p "$out"
# one thread and a dictionary larger than the pack: the binaries' CUDA code is mostly the same bytes, found again
# across files (46 MB -> 28 MB for session 44's pack with a base build; about 2 minutes)
tar -cf - -C /tmp/p40/c . | xz -T1 --lzma2=preset=1,dict=1536MiB > "$out/c.tar.xz"
du -sh /tmp/p40/c "$out/c.tar.xz"
