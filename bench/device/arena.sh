#!/usr/bin/env bash
# Session 27's arena call (issue 14): why the CPU worker computes the routed experts 1.6x slower inside the
# pipeline than `guild bench experts` runs the same pipeline (session 26: 18.9 against 11.7 us a (token, expert)
# pair at the Qwen3-235B-A22B shape, 4096-token batches). One device call; from the repo root with the pack in
# $C (bin/ with guild, the workers, the stager and tools/guild-mkmodel; lib/; base/ with the baseline's guild and
# workers; COMMIT, BASE_COMMIT; this script and lib.sh):
#   bash $C/arena.sh [SECONDS]                 session 27's call (below)
#   STREAM=1 bash $C/arena.sh [SECONDS]        the streamed configuration: --gpu-mem 3.5G (the 4-layer file's every
#                                              layer streamed, 2048-token chunks), the worker's copies in the shared
#                                              expert store that the GPU's DMA reads: the bootstrap measure of the
#                                              baseline and of this build, then --force-split 0.75 on the store's
#                                              4 KiB, THP and hugetlb pages; the bench at 2048 tokens beside it
# Steps, each under `timeout -s KILL` and skipped when it would not fit:
#   - guild-mkmodel --shape qwen3-235b-a22b --layers $LAYERS (default 4: the per-layer shapes of the 45.8 GB
#     file, 6 GB) while `guild bench experts` measures the expert pipeline alone (this build);
#   - guild bench run on it, every expert streamed (--gpu-experts none), -v: the GPU worker's split measures the
#     CPU side on its first streamed layer (every expert of it on the CPU worker): the baseline, then this build
#     (whose worker also logs each large exchange's rate and page faults);
#   - this build with --force-split $SPLIT (default 0.75: a quarter of every streamed layer's pairs on the CPU
#     worker, every pass): the CPU worker's rate on warm batches, on the 4 KiB pages of the device's defaults;
#   - the same with shmem_enabled=advise (the expert store on transparent huge pages), then with hugetlb pages
#     reserved (the store and the arena on them), both restored after (root on the device; the product does not
#     need either); only with KNOBS=1 (the device: a machine of its own).
# Output: $OUT/arena.log (everything), run-*.txt (each run's full output).
set -u
budget=${1:-150}
C=${C:-$PWD/.carry-arena}
export LD_LIBRARY_PATH=$C/lib
B=$C/bin
BASE=$C/base
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
commit=$(cat "$C/COMMIT" 2> /dev/null || echo unknown)
base_commit=$(cat "$C/BASE_COMMIT" 2> /dev/null || echo unknown)
log=$O/arena.log
t0=$(date +%s)
. "$C/lib.sh" # say, step
run() { "$@" 2>&1 | tee -a "$log"; }
thp=/sys/kernel/mm/transparent_hugepage
run say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); $(nproc) CPUs;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB RAM; commit $commit; baseline $base_commit; kernel $(uname -r)"
run say "thp enabled $(cat $thp/enabled), shmem_enabled $(cat $thp/shmem_enabled); $(grep -E 'HugePages_(Total|Free)' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"

m=/tmp/q235b-${LAYERS:-4}l.gguf
run step 40 "guild-mkmodel --shape qwen3-235b-a22b --layers ${LAYERS:-4}" "$B/tools/guild-mkmodel" \
    --shape qwen3-235b-a22b --layers "${LAYERS:-4}" --fill pool --threads "$(nproc)" -q -o $m
[ -f $m ] || { run say "no model file"; exit 0; }
batch=4096 place="--gpu-experts none"
[ -n "${STREAM:-}" ] && batch=2048 place="--gpu-mem 3.5G"
run step 30 "guild bench experts --prefill $batch (this build)" "$B/guild" bench experts --type q4_K --down-type q6_K \
    --shape qwen3-235b-a22b --tokens 1 --steps 4 --runs 3 --prefill $batch --threads 14 --gb 2

# NAME BIN FLAGS...: one bench run, its lines of interest in the log, all of it in run-NAME.txt; the most huge
# pages in use by shared memory while it runs beside it (sampled every second)
bench() {
    name=$1 bin=$2
    shift 2
    (while sleep 1; do echo "$(grep -E 'ShmemHugePages|HugePages_Free' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"; done \
        > "$O/huge-$name.txt") &
    sampler=$!
    run step "${BLIM:-30}" "bench run $name: $*" sh -c '"$0" "$@" > "'"$O"'/run-'"$name"'.txt" 2>&1; st=$?;
        grep -E "arena:|expert stores|CPU experts|exchange|pages of a|split of|prefill|streamed prefill|loaded in" "'"$O"'/run-'"$name"'.txt" | grep -v "^guild: info: \(cpu\|gpu\)-worker\[.\]: \(started\|registered\)" | tail -40; exit $st' \
        "$bin/guild" bench run -m $m --populate 4096 --gen 4 --runs 3 --threads 14 --batch 4096 -v $place "$@"
    kill $sampler 2> /dev/null
    run say "$name: shared memory's huge pages at most: $(awk '{print $2}' "$O/huge-$name.txt" | sort -n | tail -1) kB" \
        "(ShmemHugePages); HugePages_Free at least $(awk '{print $5}' "$O/huge-$name.txt" | sort -n | head -1)"
}
bench base "$BASE" --commit "$base_commit"
bench new "$B" --commit "$commit"
bench split-4k "$B" --commit "$commit" --force-split "${SPLIT:-0.75}"
old=$(sed 's/.*\[\(.*\)\].*/\1/' $thp/shmem_enabled)
if [ -n "${KNOBS:-}" ] && echo advise > $thp/shmem_enabled 2> /dev/null; then
    bench split-thp "$B" --commit "$commit" --force-split "${SPLIT:-0.75}"
    echo "$old" > $thp/shmem_enabled
fi
# hugetlb: the store (~1.4 GiB a layer) and the arena (~1.2 GiB), with room
pages=$(((${LAYERS:-4} * 1500 + 1500) / 2))
if [ -n "${KNOBS:-}" ] && echo $pages > /proc/sys/vm/nr_hugepages 2> /dev/null; then
    run say "hugetlb: $(grep -E 'HugePages_(Total|Free)' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
    bench split-hugetlb "$B" --commit "$commit" --force-split "${SPLIT:-0.75}" --huge-pages require
    echo 0 > /proc/sys/vm/nr_hugepages
fi
rm -f $m
run say done
