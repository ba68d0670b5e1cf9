#!/usr/bin/env bash
# Session 48's call (written in session 48, which had no device): the profile of the step users run, and main's
# final build of session 47 measured at last. The build: main with --gpu-prof (its kernels are session 47's final
# ones, which never ran as such); the base: fec453c in $C/base, as in s47a-c.sh.
#   here:   PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-s48   (fec453c's binaries in /tmp/p40/base)
#   device: mkdir -p /tmp/c && tar -xJf .carry-s48/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s48a.sh [SECONDS]
# 1. bench/device/alltests.sh, three programs at a time (check_cuda_fused's 2048-wide two-type case runs first here);
# 2. the pipeline's GPU worker traced (guild bench run --gpu-prof, guild bench trace): experts in RAM, and every
#    expert on the GPU; the target measured on the step the pipeline runs (one replayed graph a step, the
#    exchange's wait in it);
# 3. guild-cuda-prof --gpu-experts none (the host-driven profile), base and new: also the CUPTI tracer that
#    guild-cuda-prof now shares with the worker, against the base's own copy;
# 4. guild-cuda-prof with every expert on the GPU (new): dense_busy;
# 5. all-GPU decode and experts-in-RAM decode at 512 positions, base and new.
# Output under $OUT: s48a.log, alltests.log and s48a-files.tar.gz (the traces gzipped inside).
set -u
budget=${1:-590}
. bench/device/lib.sh # begin, step, finish, prof_ab, profg_ab, decode_ab, pipe_trace
begin s48a
pipe_trace ram new
pipe_trace gpu new
prof_ab base new
profg_ab new
decode_ab gpu base new
decode_ab ram base new
rm -f $m
finish s48a
