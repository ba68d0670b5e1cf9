#!/usr/bin/env bash
# The VM's side of bench/device/s60c.sh: builds its five sides from main and the patches in bench/device/s60c/ (the
# branches they came from may not be in a new checkout) in a worktree of their own, and packs them as .carry-A of
# this checkout, the device call's carry:
#   bash bench/device/prep-s60c.sh [WORKTREE]    (from the repository's root; WORKTREE: default /work/wt60)
#     base = main;  varb = cluster.patch (the attention's and the cluster norm's change, main's router);
#     varc = cluster + router-batch;  new = cluster + router-mbar (the pack's main build, every program);
#     var = cluster + router-mbar + router-batch
# One build folder, side after side: after the first build only the kernels a patch touches rebuild (session 60's
# run, each side from main again: 30 minutes on the 2-core VM, half of it the first build). The pack's COMMIT file
# says main's commit: its builds are main with these patches. Then the device call with carry [".carry-A"]:
#   mkdir -p /tmp/c && tar -xJf .carry-A/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s60c.sh 500
set -euo pipefail
repo=$PWD wt=${1:-/work/wt60}
p=$repo/bench/device/s60c
sub="guild guild-cpu-worker guild-gpu-worker guild-stager bench/guild-cuda-prof tests/cuda/cuda_attn_time
    tests/cuda/cuda_head_time tests/cuda/check_cuda_fused"
[ -d "$wt" ] || git worktree add -q --detach "$wt" main
cd "$wt"
git checkout -q -- gpu-worker
git checkout -q --detach "$(git -C "$repo" rev-parse main)"
[ -x configure ] || autoreconf -fi > /dev/null 2>&1
mkdir -p build
[ -f build/Makefile ] || (cd build && ../configure PYTHON=/usr/bin/python3 > /dev/null)
make -C build -j2 > /dev/null # everything once: the generated sources (proto/) come first only in a whole build
rm -rf /tmp/p40 && mkdir -p /tmp/p40
side() { # NAME WHAT: the worktree as it is built; its programs into /tmp/p40/NAME
    # shellcheck disable=SC2086 # sub: words
    make -C build -j2 $sub > /dev/null
    mkdir -p "/tmp/p40/$1"
    # shellcheck disable=SC2086
    (cd build && cp $sub "/tmp/p40/$1/")
    echo "built $1: $2"
}
patches() { for f in "$@"; do git apply "$p/$f.patch"; done; }
# each side from the one before, only the files that change touched (a file put back and patched again rebuilds)
r=gpu-worker/dense/cuda/router.cu
side base main
git rev-parse --short=12 HEAD > /tmp/p40/base/COMMIT
patches cluster
side varb "main + cluster"
patches router-batch
side varc "main + cluster + router-batch"
git checkout -q -- $r
patches router-mbar router-batch
side var "main + cluster + router-mbar + router-batch"
git checkout -q -- $r
patches router-mbar
make -C build -j2 guild guild-cpu-worker guild-gpu-worker guild-stager tools/guild-mkmodel bench/guild-cuda-prof \
    tests/mk_mtp_oracle tests/cuda/check_cuda_{attn,attn_host,backend,batch,clock,expert_mma,finite,fused,gdn_host} \
    tests/cuda/check_cuda_{host,kernels,kv_long,mtp,pairs_mma,pick,seq} tests/cuda/cuda_head_time \
    tests/cuda/cuda_attn_time tests/cuda/cuda_pairs_time > /dev/null
echo "built new: main + cluster + router-mbar"
PACK_FILES='' bash "$repo/bench/device/pack-xz.sh" "$wt" "$repo/.carry-A"
git checkout -q -- gpu-worker
