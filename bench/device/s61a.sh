#!/usr/bin/env bash
# Session 61: `--backend auto` and `--gpu-mem auto` (f9b0d2a, the defaults now) on the device, after s60c.sh in the
# same call. The coordinator of f9b0d2a's build (stripped, .carry-A/auto.tar.xz: `guild` alone) beside the pack's
# workers (bin/: no wire format changed between them); the model made again (s60c.sh removes its own).
#   C=/tmp/c bash bench/device/s61a.sh [SECONDS]
# What it shows: no flag gives cuda and says why; the plan says the model fits (no budget); a context too large
# for the device is planned against the device's memory; the coordinator of the multi-process pipeline holds no
# memory on the device (nvidia-smi's compute processes while a run decodes: the GPU worker alone).
set -u
budget=${1:-110}
. bench/device/lib.sh
setup s61a
A=$C/auto
mkdir -p "$A" && cp -a "$C/bin/." "$A/" && tar -xJf .carry-B/auto.tar.xz -C "$A"
model_make
step 20 "guild plan, no flags" sh -c '"$0" plan -m "$1" 2>&1 | head -n 3' "$A/guild" "$m"
step 20 "guild plan --ctx 2000000 (a KV cache of ~190 GB), no --gpu-mem" sh -c \
    '"$0" plan -m "$1" --ctx 2000000 2>&1 | grep -E "^(backend|--gpu-mem|gpu plan|  KV cache|guild plan)"' \
    "$A/guild" "$m"
step 40 "guild run --single-process, no --backend" sh -c \
    '"$0" run -m "$1" -p "The quick brown fox" -n 32 --temp 0 -v --single-process 2>&1 |
    grep -E "^run: |cuda backend:|tok/s|rror" | cut -c1-300' "$A/guild" "$m"
step 45 "guild run (multi-process), no --backend: the device's processes while it decodes" sh -c \
    '"$0" run -m "$1" -p "The quick brown fox" -n 2000 --ignore-eos --temp 0 -v > /dev/null 2> "$2/auto-mp.err" &
    p=$!; sleep 25; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; ps -o pid,comm -p $p;
    wait $p; echo "run rc=$?"; grep -E "^run: |tok/s|rror" "$2/auto-mp.err" | cut -c1-300' "$A/guild" "$m" "$O"
rm -f "$m"
finish s61a
