#!/bin/bash
# ASan test run times: -O2 -g (ci8's build-asan) vs -O1 (build-asan-o1), each test's two builds side by side
A=/work/ci8/guild/build-asan; B=/work/wt-citime/build-asan-o1
for t in "$@"; do
  for d in $A $B; do
    ( cd $d && /usr/bin/time -f "$t $(basename $d) wall %e user %U sys %S" make -s check TESTS=$t >/dev/null 2>/tmp/citime/rt.$(basename $d).err; tail -1 /tmp/citime/rt.$(basename $d).err; grep -h "^# PASS\|^# FAIL\|^# SKIP" $d/test-suite.log | tr '\n' ' '; echo ) &
  done
  wait
done
