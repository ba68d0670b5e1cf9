#!/usr/bin/env bash
# Session 50's first call: the router's launch publishing a decode step's token to the MoE exchange itself, and the
# next layer's norm combining the CPU workers' rows where they wrote them (no publish, no take_y launch; off with
# --cuda-off xchg-fuse), and the next layer's weights and keys asked into L2 while the CPU workers compute (off with
# --cuda-off l2-next), against main's 934f42a (base: /tmp/p40/base when packed).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-s50a
#   device: mkdir -p /tmp/c && tar -xJf .carry-s50a/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s50a.sh [SECONDS]
# 1. bench/device/alltests.sh (check_cuda_backend's exchange from the device, check_cuda_fused's in-place rows);
# 2. the pipeline's GPU worker traced with experts in RAM: new, base;
# 3. experts-in-RAM decode at 512 positions: new, base, new without l2-next, new without xchg-fuse, new, base;
# 4. the trace of new without l2-next; all-GPU decode new and base once.
# Output under $OUT: s50a.log, alltests.log and s50a-files.tar.gz (the traces gzipped inside).
set -u
budget=${1:-590}
. bench/device/lib.sh # begin, step, finish, pipe_trace, decode_ab
begin s50a
pipe_trace ram new
pipe_trace ram base
decode_ab ram new base new+off-l2-next new+off-xchg-fuse new2 base2
pipe_trace ram new+off-l2-next
decode_ab gpu new base
rm -f $m
finish s50a
