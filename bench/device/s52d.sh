#!/usr/bin/env bash
# Session 52's fourth call, two more trigger points against main (new: the router's trigger after its choice, as
# landed): var = ff08cc9 (E3: the experts' gate/up launch lets the down products in after its products; /tmp/p40/var
# when packed), base = f6dfb7c (E7: the decode attention lets the output product in after its splits' exchange
# instead of after its keys). Neither is on main.
#   here:   PACK_FILES="guild guild-cpu-worker guild-gpu-worker guild-stager tools/guild-mkmodel bench/guild-cuda-prof"
#           bash bench/device/pack-xz.sh /work/main .carry-s52d
#   device: mkdir -p /tmp/c && tar -xJf .carry-s52d/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s52d.sh [SECONDS]
# 1. the pipeline's GPU worker traced with every expert on the GPU: new, var, base, in turns three times;
# 2. experts in RAM: new, base.
# Output under $OUT: s52d.log and s52d-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
begin_bare s52d
for side in new var base new2 var2 base2 new3 var3 base3; do pipe_trace gpu $side; done
pipe_trace ram new
pipe_trace ram base
rm -f $m
finish s52d
