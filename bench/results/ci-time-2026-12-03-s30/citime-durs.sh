#!/bin/bash
# per-test durations in a build tree: log birth -> trs mtime
d=$1
find "$d" -name '*.trs' | while read f; do
  l=${f%.trs}.log
  b=$(stat -c %W "$l"); m=$(stat -c %.3Y "$f"); bb=$(stat -c %.3W "$l")
  r=$(grep -m1 '^:test-result:' "$f" | cut -d' ' -f2)
  printf "%8.1f %s %s %s\n" "$(echo "$m - $bb" | bc)" "$(date -u -d @${bb%.*} +%T)" "$r" "${f#$d/}"
done | sort -k2
