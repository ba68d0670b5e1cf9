#!/usr/bin/env bash
# Session 50's third call: the router's publish ringing after the block's barrier and one thread's system-scope fence
# (cumulative), without a fence by every thread (new), against s50b's build (var: /tmp/p40/var when packed, a fence
# round of the block) and main's 934f42a (base).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-s50c
#   device: mkdir -p /tmp/c && tar -xJf .carry-s50c/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s50c.sh [SECONDS]
# 1. bench/device/alltests.sh (check_cuda_backend's exchange from the device: the ring's ordering);
# 2. the pipeline's GPU worker traced with experts in RAM: new, var;
# 3. experts-in-RAM decode at 512 positions: new, var, base.
# Output under $OUT: s50c.log, alltests.log and s50c-files.tar.gz (the traces gzipped inside).
set -u
budget=${1:-590}
. bench/device/lib.sh # begin, step, finish, pipe_trace, decode_ab
begin s50c
pipe_trace ram new
pipe_trace ram var
decode_ab ram new var base
rm -f $m
finish s50c
