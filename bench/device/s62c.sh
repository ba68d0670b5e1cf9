#!/usr/bin/env bash
# Issue 17, session 62's third call: s62b's form with the row's preparation out of line (ad_prep_heads
# __noinline__) and its per-head code in one copy (109,056 bytes of code against main's 88,064 and s62b's 140,544):
# s62a/s62b's attention was 4 us slower a launch even with the preparation off, its unchanged phases (the merge, the
# end) slower as much as the new one: the launch's code grew by the inlined preparation. Sides: new (this build),
# base (main's, /tmp/p40/base), new+off-qk-attn; two traces a side in turns, the preparation's bit test.
# Pack: PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager tools/guild-mkmodel bench/guild-cuda-prof
#   tests/cuda/check_cuda_attn_prep" bash bench/device/pack-xz.sh WORKTREE .carry-A; C=/tmp/c bash bench/device/s62c.sh
set -u
budget=${1:-120}
. bench/device/lib.sh
begin_bare s62c
for side in new base new+off-qk-attn new2 base2; do pipe_trace gpu "$side"; done
pack_test 60 new "$C" check_cuda_attn_prep "" "$O/attn-prep-new.log"
step_tl attn new
rm -f "$m"
finish s62c
