#!/usr/bin/env bash
# Session 49's call: s48a.sh's and s48b.sh's measurements that matter most, in one call (the device was short:
# two refusals before it). Pack as s48a.sh's (.carry-s48: main 0a0d77f, base fec453c).
#   device: mkdir -p /tmp/c && tar -xJf .carry-s48/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s49a.sh [SECONDS]
# 1. bench/device/alltests.sh (main's final build of sessions 47-48 has not run its tests on a GPU);
# 2. the pipeline's GPU worker traced (guild bench run --gpu-prof, guild bench trace): experts in RAM, every expert
#    on the GPU;
# 3. guild-cuda-prof --no-trace --timeline router and attn, experts in RAM and on the GPU; the same kernels alone
#    (cuda_head_time --timeline 1, cuda_attn_time --timeline 512);
# 4. guild-cuda-prof with every expert on the GPU, and --gpu-experts none (the host-driven profile), new only.
# Output under $OUT: s49a.log, alltests.log and s49a-files.tar.gz (the traces gzipped inside).
set -u
budget=${1:-590}
. bench/device/lib.sh # begin, step, finish, pipe_trace, timelines, profg_ab, prof_ab
begin s49a
pipe_trace ram new
pipe_trace gpu new
timelines
profg_ab new
prof_ab new
rm -f $m
finish s49a
