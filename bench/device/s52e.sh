#!/usr/bin/env bash
# Session 52's fifth call: main's head (new: the router's trigger after its choice where it does not publish, the
# experts' gate/up trigger after its products) against the session's start 00e18fd (var), with two more trigger
# points as variants of new (neither on main): base = 34a9d05 (E9: the publishing router's trigger after its choice
# too; experts in RAM) and e8 = 8e7e9ff (E8: the fused norm's trigger after its squares' exchange instead of after
# its row's loads; /tmp/p40/var-e8 when packed).
#   here:   PACK_FILES= bash bench/device/pack-xz.sh /work/main .carry-s52e
#   device: mkdir -p /tmp/c && tar -xJf .carry-s52e/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s52e.sh [SECONDS]
# 1. bench/device/alltests.sh on new;
# 2. the pipeline's GPU worker traced with every expert on the GPU: new, var, e8, in turns twice;
# 3. experts in RAM: new, base, in turns twice; the CPU worker's dense_turnaround_us: new, base;
# 4. all-GPU decode at 512 positions: new, var, in turns twice (3 runs each).
# Output under $OUT: s52e.log, alltests.log and s52e-files.tar.gz.
set -u
budget=${1:-590}
. bench/device/lib.sh
bin_of() { case $1 in base*) echo "$BASE" ;; e8*) echo "$C/var-e8" ;; var*) echo "$C/var" ;; *) echo "$B" ;; esac; }
begin s52e
for side in new var e8 new2 var2 e82; do pipe_trace gpu $side; done
for side in new base new2 base2; do pipe_trace ram $side; done
turnaround new base
decode_ab gpu new var new2 var2
rm -f $m
finish s52e
