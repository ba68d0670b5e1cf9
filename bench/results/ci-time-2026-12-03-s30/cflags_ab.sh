#!/bin/bash
# compile sample files with the ASan flags at two CFLAGS sets, the two variants of a file side by side
cd /work/wt-citime/build-asan-o1
base='-DHAVE_CONFIG_H -I. -I.. -DGUILD_FIXTURES="x" -DGUILD_BUILDDIR="x" -DGUILD_SRCDIR="x" -std=gnu11 -ffp-contract=off -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wmissing-prototypes -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer'
extra="$(pkg-config --cflags check libzmq libprotobuf-c 2>/dev/null) -I/usr/local/cuda/include"
for f in core/kern/x86/avx512_vnni.c core/kern/x86/amx.c core/kern/x86/avx2.c gpu-worker/dense/cuda/cuda_backend.c gpu-worker/dense/gpu_plan.c coordinator/supervisor.c tests/check_mkmodel.c tests/check_ipc.c bench/run.c coordinator/server/engine.c core/model/model.c; do
  [ -f ../$f ] || { echo "missing $f"; continue; }
  for v in "-O2 -g" "-O1 -g1" ; do
    ( s=$(date +%s.%N); gcc $base $extra $v -c ../$f -o /tmp/citime/ab.$$.$RANDOM.o 2>/dev/null; rc=$?; e=$(date +%s.%N); printf "%s|%s|%.2f|rc=%s\n" "$f" "$v" "$(echo "$e - $s" | bc)" $rc ) &
  done
  wait
done
rm -f /tmp/citime/ab.*.o
