#!/usr/bin/env bash
# Issue 17, session 65's fifth call: s65c.sh's builds, asked on the H200 (an H100 came): the experts' L2
# windows, landed from s65c's branch, against main before them: traces in turns (new, base, new2, base2), all-GPU
# decode new/base/new2/base2, experts-in-RAM decode new/base. Pack: s65c.sh's.
# Run: mkdir -p /tmp/c && tar -xJf .carry-B/c.tar.xz -C /tmp/c && C=/tmp/c bash bench/device/s65d.sh [SECONDS]
set -u
budget=${1:-200}
. bench/device/lib.sh
begin_bare s65d
for side in new base new2 base2; do pipe_trace gpu "$side"; done
decode_ab gpu new base new2 base2
decode_ab ram new base
rm -f "$m"
finish s65d
