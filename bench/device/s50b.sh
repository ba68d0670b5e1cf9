#!/usr/bin/env bash
# Session 50's second call: s50a's fusions (the router's launch publishes a decode step's token, the next norm
# combines the rows in place) with the router's publish in one fence round at its end and the exchange's counters
# loaded with its first loads, against main's 934f42a (base: /tmp/p40/base when packed); the check_cuda_backend
# test that failed in s50a (its routers now F32).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-s50b
#   device: mkdir -p /tmp/c && tar -xJf .carry-s50b/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s50b.sh [SECONDS]
# 1. bench/device/alltests.sh;
# 2. the pipeline's GPU worker traced with experts in RAM: new, base, new with --cuda-off xchg-fuse;
# 3. experts-in-RAM decode at 512 positions, new and base in turns, three times; all-GPU decode new and base once.
# Output under $OUT: s50b.log, alltests.log and s50b-files.tar.gz (the traces gzipped inside).
set -u
budget=${1:-590}
. bench/device/lib.sh # begin, step, finish, pipe_trace, decode_ab
begin s50b
pipe_trace ram new
pipe_trace ram base
pipe_trace ram new+off-xchg-fuse
decode_ab ram new base new2 base2 new3 base3
decode_ab gpu new base
rm -f $m
finish s50b
