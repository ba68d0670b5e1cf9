#!/usr/bin/env bash
# Session 49's third call: the exchange's publish with a lone block ringing after one fence (02a83ea), against the
# exchange's kernels under PDL alone (88bbace, as var: its binaries in /tmp/p40/var when packed) and main's 0a0d77f
# (base: /tmp/p40/base).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-s49b
#   device: mkdir -p /tmp/c && tar -xJf .carry-s49b/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s49c.sh [SECONDS]
# 1. bench/device/alltests.sh (check_cuda_backend runs the exchange's kernels);
# 2. the pipeline's GPU worker traced with experts in RAM: new, var;
# 3. experts-in-RAM decode at 512 positions, new and var in turns, twice; then base's trace where time is left.
# Output under $OUT: s49c.log, alltests.log and s49c-files.tar.gz (the traces gzipped inside).
set -u
budget=${1:-590}
. bench/device/lib.sh # begin, step, finish, pipe_trace, decode_ab
begin s49c
pipe_trace ram new
pipe_trace ram var
decode_ab ram new var new2 var2
pipe_trace ram base
rm -f $m
finish s49c
