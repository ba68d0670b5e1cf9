#!/usr/bin/env bash
# Session 49's call with the exchange's kernels under programmatic dependent launch (88bbace), against main's
# 0a0d77f as the base (its binaries in /tmp/p40/base when packed), and the measurements of the new build (the
# pipeline with every expert on the GPU, the timelines, the profiles).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-s49
#   device: mkdir -p /tmp/c && tar -xJf .carry-s49/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s49b.sh [SECONDS]
# 1. bench/device/alltests.sh (check_cuda_backend runs the exchange's kernels);
# 2. the pipeline's GPU worker traced with experts in RAM, base then new: the exchange's kernels' busy time a layer;
# 3. experts-in-RAM decode at 512 positions, base and new in turns;
# 4. every expert on the GPU traced (new); the router and attention timelines; guild-cuda-prof's profiles.
# Output under $OUT: s49b.log, alltests.log and s49b-files.tar.gz (the traces gzipped inside).
set -u
budget=${1:-590}
. bench/device/lib.sh # begin, step, finish, pipe_trace, decode_ab, timelines, profg_ab, prof_ab
begin s49b
pipe_trace ram base
pipe_trace ram new
decode_ab ram base new base2 new2
pipe_trace gpu new
timelines
profg_ab new
prof_ab new
rm -f $m
finish s49b
