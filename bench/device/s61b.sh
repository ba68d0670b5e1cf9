#!/usr/bin/env bash
# Session 61's second call: the form to land from s60c (varc: the attention's and the cluster norm's values handed
# over as async stores on the receiver's mbarrier, the router's row loaded 16 at a time; main's router otherwise) as
# the pack's full build, against main in turns, with every CUDA test program on it. s60c (H100, this session):
# dense busy a layer 25.39 / 25.40 us against main's 26.52 / 26.51, all-GPU decode 426.1 against 415.7 tok/s.
# Pack: in a worktree at 9068ac5 (main's product code before f9b0d2a) with bench/device/s60c/cluster.patch and
# router-batch.patch applied, every program built, /tmp/p40/base (main's build) beside it:
#   PACK_FILES= bash bench/device/pack-xz.sh WORKTREE .carry-A
#   C=/tmp/c bash bench/device/s61b.sh [SECONDS]
set -u
budget=${1:-300}
. bench/device/lib.sh
turns_ab s61b
