#!/usr/bin/env bash
# Session 42's seventh call: what clock the H200's SMs run at during a decode step's latency-bound kernels, and
# whether Nsight Compute is on the machine (a later session's per-kernel stall reasons). Pack in $C: bin/ (guild,
# the workers, guild-mkmodel):
#   C=/tmp/c bash bench/device/s42g.sh [SECONDS]
# nvidia-smi's SM and memory clocks every 100 ms, idle, then during all-GPU decode and experts-in-RAM decode at 512.
# Output under $OUT: s42g.log and s42g-files.tar.gz (clocks-*.csv).
set -u
budget=${1:-120}
. bench/device/lib.sh # say, step, setup, finish
setup s42g
say "ncu: $(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -n 1 || echo none)"
nvidia-smi -q -d CLOCK,PERFORMANCE 2>&1 | grep -E "Graphics|SM |Memory|Applications|Default|Max|Idle|Clocks Event|Active|Throttle" | head -n 30
m=/tmp/q30b.gguf
step 60 "guild-mkmodel qwen3-30b-a3b" "$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool \
    --threads "$(nproc)" -q -o $m
[ -s $m ] || { finish s42g; exit 1; }
for kind in gpu ram; do
    extra="--gen 64"
    [ $kind = ram ] && extra="--gen 48 --gpu-experts none"
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw --format=csv -lms 100 \
        > "$O/clocks-$kind.csv" 2>&1 &
    sp=$!
    # shellcheck disable=SC2086
    step 40 "decode ($kind)" sh -c '"$0" "$@" 2>&1 | grep -E "^ +512 " | tail -n 1' \
        "$B/guild" bench run -m "$m" --populate 512 --runs 2 $extra
    kill $sp 2> /dev/null
    say "$kind: SM clock MHz (samples: median, min, max of those with the GPU busy)"
    awk -F', ' 'NR > 1 && $4 + 0 > 0 {print $2 + 0}' "$O/clocks-$kind.csv" | sort -n |
        awk '{a[NR] = $1} END {if (NR) print "n=" NR, "median", a[int((NR + 1) / 2)], "min", a[1], "max", a[NR]}'
done
rm -f $m
finish s42g
