#!/usr/bin/env bash
# Session 32, pairprobe (issue 18): is aggregate decode >= 90% of its limit at every size? `guild bench sessions` at
# --gpu-mem 8G, 1..16 sessions, 5 timed runs a size, each between DRAM probes right before and right after it
# (bench/paired.h: each run against the limit at its own flanks, phase changes left out), run again while the
# budget lasts (the third time with 2 probes a flank: how far two probes in a row agree). The machine's memory
# settings first. Usage: C=/tmp/c bash pairprobe.sh [SECONDS] (the pack in $C: bin/, lib/, COMMIT). Output under
# $OUT: pairprobe.log and pairprobe-files.tar.gz (each run's table and JSON).
set -u
# shellcheck disable=SC2034 # lib.sh's step reads t0 and budget
t0=$(date +%s) budget=${1:-300}
C=${C:-/tmp/c}
B=$C/bin
export LD_LIBRARY_PATH=$C/lib
R=${OUT:-/tmp/guild-out}
O=/tmp/guild-pairprobe-out
mkdir -p "$R" "$O"
exec > >(tee -a "$R/pairprobe.log") 2>&1
. bench/device/lib.sh # say, step
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit"
for f in enabled shmem_enabled; do echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>&1)"; done
grep -E "HugePages_(Total|Free)|MemTotal" /proc/meminfo
m=/tmp/q30b.gguf
step 90 "guild-mkmodel" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || { say "no model"; tar -czf "$R/pairprobe-files.tar.gz" -C "$O" .; exit 1; }
sessions() { # TAG PROBES: the sessions bench, its table in $O/sessions-TAG.out, the paired and strict tables shown
    step 70 "guild bench sessions ($1, --probes $2)" sh -c '"$0" "$@" > "'"$O/sessions-$1.out"'" 2>&1; st=$?;
        sed -n "/^# paired: each/,\$p" "'"$O/sessions-$1.out"'"; exit $st' "$B/guild" bench sessions -m $m \
        --gpu-mem 8G --threads 14 --sessions 1,2,4,8,16 --prompt 128 --gen 16 --repeat 5 --probes "$2" \
        --commit "$commit" --json "$O/sessions-$1.json"
}
sessions 1 1
sessions 2 1
sessions 3 2
rm -f $m
tar -czf "$R/pairprobe-files.tar.gz" -C "$O" .
say "pairprobe done"
