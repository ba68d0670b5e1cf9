#!/usr/bin/env bash
# Session 28, sesslimit2 (issue 18): one call. The machine's memory settings (THP, hugetlb, caches); the Qwen3-30B-A3B-
# shaped model; `guild bench bw` with every CPU (16 threads) and with the CPU worker's 14 taken in turns (does the
# 100/150 GB/s clustering follow the thread count?); `guild bench sessions` at --gpu-mem 8G, multi-process, the new
# build (its probe reads as the CPU worker does) and the baseline aa352ff (its probe: every CPU streaming) in the
# same call; guild-cuda-prof at --gpu-mem 8G with 1 and 16 sessions (where the GPU's step grows with the sessions);
# the new build again if the budget allows. Usage: C=/tmp/c bash .carry-sesslimit2/sesslimit2.sh [SECONDS]
set -u
t0=$(date +%s)
budget=${1:-200}
C=${C:-/tmp/c}
B=$C/bin
export LD_LIBRARY_PATH=$C/lib
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee -a "$O/run.log") 2>&1
. bench/device/lib.sh
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; new $commit, base $base_commit"
for f in enabled shmem_enabled defrag; do echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>&1)"; done
grep -E "HugePages_(Total|Free)|Hugepagesize|MemTotal" /proc/meminfo
lscpu 2>/dev/null | grep -iE "model name|socket|core|thread|numa|L[123]" | sed 's/  */ /g'
m=/tmp/q30b.gguf
step 90 "guild-mkmodel" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 14 -q -o $m
[ -f $m ] || { say "no model"; exit 1; }
bw() { # THREADS TAG
    timeout -s KILL 10 "$B/guild" bench bw --gb 4 --passes 5 ${1:+--threads $1} 2>&1 | grep "^read" | sed "s/^/bw $2: /"
}
say "bench bw: 16 and 14 threads in turns"
for i in 1 2 3; do bw "" "16t-$i"; bw 14 "14t-$i"; done
sessions() { # TAG GUILD COMMIT
    step 50 "guild bench sessions ($1)" "$2" bench sessions -m $m --gpu-mem 8G --threads 14 \
        --sessions 1,2,4,8,16 --prompt 128 --gen 16 --repeat 3 --probes 2 --commit "$3" --json "$O/sessions-$1.json"
}
sessions new "$B/guild" "$commit"
sessions base "$C/base/guild" "$base_commit"
for n in 1 16; do
    step 45 "guild-cuda-prof --sessions $n" sh -c '"$0" "$@" > "'"$O/prof-s$n.txt"'" 2>&1; st=$?; grep -E "step|busy|idle|memcpy" "'"$O/prof-s$n.txt"'" | head -n 12; exit $st' \
        "$B/bench/guild-cuda-prof" -m $m --gpu-mem 8G --threads 14 --sessions $n --populate 128 --steps 16
done
sessions new2 "$B/guild" "$commit"
say "done"
