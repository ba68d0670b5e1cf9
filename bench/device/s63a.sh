#!/usr/bin/env bash
# Issue 17, session 63's call (prepared; no machine ran it): the weights a decode step reads once marked as streaming in
# L2 (bench/device/s63a/l2stream.patch: an access policy window over each product's and each routed-expert launch's
# weights, hits and misses there evicted first, gpu-worker/dense/cuda/l2_stream.h), so that the step's code, KV cache
# and activations stay in L2 from one layer to the next (sessions 59-62: the dense step's kernels run their code cold,
# fetched from device memory, as ~36 MB of weights a layer pass through L2 between two layers' launches). No kernel's
# code changes (launch attributes only). Sides: new (the patch), base (main, flat in /tmp/p40/base), new+off-l2-stream
# (the patch with --cuda-off l2-stream: should be base), var (the patch with the routed experts' launches unmarked: the
# products' windows alone; /tmp/p40/var by hand); traces in turns, the attention's phases in the step, the windows read
# back and the products' bit tests (check_cuda_kernels' l2_stream and matmul cases), the backend's on new, all-GPU and
# experts-in-RAM decode.
# Builds: new = main + bench/device/s63a/l2stream.patch (git apply; the code, its test, --cuda-off l2-stream, the docs);
# var = new with expert_pair.cu's window made l2_span(NULL, 0), l2_span(NULL, 0) (its guild and workers and
# guild-cuda-prof flat in /tmp/p40/var); base = main's (flat in /tmp/p40/base, with COMMIT).
# Pack: PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-A; C=/tmp/c bash bench/device/s63a.sh [SECONDS]
set -u
budget=${1:-300}
. bench/device/lib.sh
begin_bare s63a
for side in new base var new+off-l2-stream new2 base2; do pipe_trace gpu "$side"; done
pack_test 30 new "$C" check_cuda_kernels l2_stream "$O/kernels-l2-new.log"
decode_ab gpu new base
pack_test 60 new "$C" check_cuda_kernels matmul "$O/kernels-matmul-new.log"
pack_test 60 new "$C" check_cuda_fused backend "$O/fused-backend-new.log"
step_tl attn new base
decode_ab gpu var new2 base2
decode_ab ram new base
rm -f "$m"
finish s63a
