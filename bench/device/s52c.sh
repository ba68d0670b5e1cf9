#!/usr/bin/env bash
# Session 52's third call: the router letting the experts' launch in after its choice where it does not publish
# (new: main with that change), against main's 00e18fd (var: /tmp/p40/var when packed) and ff08cc9 (base: new with
# the experts' gate/up launch letting the down products in after its products, E3, a measurement variant).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s52c
#   device: mkdir -p /tmp/c && tar -xJf .carry-s52c/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s52c.sh [SECONDS]
# 1. bench/device/alltests.sh;
# 2. the pipeline's GPU worker traced with every expert on the GPU: new, var, base, in turns twice; experts in RAM:
#    new, var;
# 3. all-GPU decode at 512 positions: new, var, base, in turns twice (3 runs each).
# Output under $OUT: s52c.log, alltests.log and s52c-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin s52c
for side in new var base new2 var2 base2; do pipe_trace gpu $side; done
pipe_trace ram new
pipe_trace ram var
decode_ab gpu new var base new2 var2 base2
rm -f $m
finish s52c
