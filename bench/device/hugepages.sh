#!/usr/bin/env bash
# Whether the CPU worker's expert store on 2 MiB hugetlb pages reads faster than on 4 KiB shared pages (issues 17,
# 18, 14): the device machine has no hugetlb pages and shmem THP `never`, so the store that the GPU worker streams
# from (every configuration with a GPU budget) has been on 4 KiB pages in every device run; `--gpu-experts none`
# keeps the worker's copies in its own memory, advised for THP, and is not this question. Rounds of the tip with
# no hugetlb pages and with enough reserved for the Qwen3-30B-A3B shape's store and the arena (--huge-pages auto
# takes them), the order flipped each round: `guild bench sessions --sessions 1,4,16` at --gpu-mem 8G (whole
# layers resident: --routing none, as lead.sh's sessions table) and decode at 8G with a routing profile the tip
# records (lead_ab.sh's). Needs root on the device (it writes
# /proc/sys/vm/nr_hugepages; without it, it says so and stops). Pack: lead.sh's. From the repo root:
#   C=/tmp/c bash bench/device/hugepages.sh [SECONDS] [ROUNDS]
# Output under $OUT: hugepages.log and hugepages-files.tar.gz.
set -u
budget=${1:-280}
rounds=${2:-2}
C=${C:-/tmp/c}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-hp-out # (emptied: a warm machine keeps /tmp between calls)
rm -rf "$O"
mkdir -p "$R" "$O"
exec > >(tee -a "$R/hugepages.log") 2>&1
t0=$(date +%s)
. bench/device/lib.sh # say, step, prompt8, run8
hp=${HP_FILE:-/proc/sys/vm/nr_hugepages} # (a file of its own when the script is tried on a fake pack)
say "hugepages: commit $(cat "$C/COMMIT" 2> /dev/null); uid $(id -u); $(grep -E 'HugePages_(Total|Free)|Hugepagesize' /proc/meminfo | tr -s ' \n' ' ');" \
    "shmem THP $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled)"
# 11,500 pages of 2 MiB (22.5 GiB): the 30B shape's 16.35 GiB of experts in the store, the arena and the DRAM probe
pages() { # COUNT: reserve COUNT hugetlb pages (0: none); fails when the machine gives fewer
    echo "$1" > $hp 2> /dev/null
    got=$(cat $hp 2> /dev/null || echo 0)
    say "nr_hugepages $1: got $got"
    [ "$got" -ge "$1" ]
}
pages 0 || true
if ! pages 11500; then
    say "cannot reserve hugetlb pages here: stopping"
    pages 0
    exit 1
fi
pages 0
m=/tmp/q30b.gguf
step 80 "model: Qwen3-30B-A3B shape, --fill pool" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -f $m ] || exit 1
prompt8 "$O/prompt.txt"
run8 record "$B" --record-routing $m.routing
[ -f $m.routing ] || { say "no routing profile recorded"; exit 1; }
sess() { # NAME: the sessions bench at 8G with the profile beside the model; its table and the store's pages
    step 60 "sessions 1,4,16 at 8G $1" sh -c '"$0" "$@" > "'"$O"'/s-'"$1"'.txt" 2>&1; st=$?;
        grep -E "^ +(1|4|16) |expert stores|arena:" "'"$O"'/s-'"$1"'.txt"; exit $st' \
        "$B/guild" bench sessions -m $m --gpu-mem 8G --routing none --threads 14 --sessions 1,4,16 --prompt 128 \
        --gen 16 --repeat 3 --probes 1 -v --json "$O/s-$1.json"
}
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then order="4k huge"; else order="huge 4k"; fi
    for mode in $order; do
        if [ $mode = huge ]; then pages 11500 || break; else pages 0; fi
        run8 "$mode-$r" "$B" --routing $m.routing -v
        grep -hE "expert stores|arena:" "$O/r-$mode-$r.txt" | head -3
        sess "$mode-$r"
    done
done
pages 0
say "medians (4k | huge)"
for mode in 4k huge; do
    d=$(grep -h "decode:" "$O"/r-$mode-*.txt 2> /dev/null | sed -E 's/.*\(([0-9.]+) tok\/s\).*/\1/' | sort -n | tr '\n' ' ')
    s=$(for f in "$O"/s-$mode-*.txt; do grep -E "^ +(1|4|16) " "$f" | awk '{printf "%s:%s ", $1, $2}'; done 2> /dev/null)
    echo "$mode: 8G profile decode tok/s: $d| sessions: $s"
done
rm -f $m $m.routing
tar -czf "$R/hugepages-files.tar.gz" -C "$O" .
say "hugepages done"
