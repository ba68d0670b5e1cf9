#!/bin/sh
# Multi-process stress of the exchange protocol (tests/ipc_stress.c): millions of lockstep round trips
# between a dense process and worker processes, every step checked for loss, duplication, overrun and
# payload ordering. Each run has a time limit so a loaded 2-core CI machine cannot stall the suite; a run
# that stops at its limit still checks every exchange it made.
set -e
bin="${GUILD_BUILDDIR:-.}/tests/ipc_stress"
"$bin" --workers 1 --slots 1 --spin-ns 50000 --rounds 2000000 --seconds 6
# more processes than this machine may have cores: short spins, then futex sleeps
"$bin" --workers 2 --slots 2 --spin-ns 2000 --rounds 200000 --seconds 4
# futex on every wait
"$bin" --workers 3 --slots 1 --spin-ns 0 --rounds 20000 --seconds 4
