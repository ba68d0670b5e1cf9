#!/usr/bin/env bash
# Where a decode step's time goes on the device: an Nsight Systems trace of `guild bench run` decode with every
# kernel of the captured graphs traced as its own node, summarised per kernel (time, count, mean) plus the
# step's busy fraction (sum of kernel time over wall time). Pack first (bench/device/pack.sh), then on the
# device from the repo root:  bash bench/device/profile.sh MODEL.gguf [extra guild bench run flags]
# Output: $OUT/profile.log (and the .nsys-rep when it is small enough to come back).
set -u
model=${1:?usage: profile.sh MODEL.gguf [flags]}
shift
export LD_LIBRARY_PATH=$PWD/.carry/lib
B=$PWD/.carry/bin
O=${OUT:-/tmp/guild-out}
mkdir -p "$O"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
exec > >(tee -a "$O/profile.log") 2>&1
if [ -z "$nsys" ]; then
    echo "no nsys on this machine"
    exit 77
fi
echo "== nsys $($nsys --version 2>&1 | head -1); commit $(cat .carry/COMMIT 2>/dev/null)"
"$nsys" profile -q -o /tmp/guild-prof --force-overwrite true -t cuda --cuda-graph-trace=node \
    "$B/guild" bench run -m "$model" --populate 512 --gen 32 --runs 1 "$@"
"$nsys" stats -q --report cuda_gpu_kern_sum --format csv -o /tmp/guild-prof /tmp/guild-prof.nsys-rep > /dev/null
head -40 /tmp/guild-prof_cuda_gpu_kern_sum.csv
# Per-kernel trace of the last decode steps: the gaps between kernels are the launch cost a fusion removes.
"$nsys" stats -q --report cuda_gpu_trace --format csv -o /tmp/guild-prof /tmp/guild-prof.nsys-rep > /dev/null
python3 - /tmp/guild-prof_cuda_gpu_trace.csv <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]))]
k = [r for r in rows if r.get("Name") and not r["Name"].startswith("[CUDA")]
if not k:
    print("no kernels in trace"); sys.exit()
tail = k[-2000:]
start = [int(r["Start (ns)"]) for r in tail]
dur = [int(r["Duration (ns)"]) for r in tail]
wall = start[-1] + dur[-1] - start[0]
busy = sum(dur)
gaps = sorted(start[i + 1] - (start[i] + dur[i]) for i in range(len(tail) - 1))
print(f"last {len(tail)} kernels: wall {wall/1e3:.1f} us, kernel time {busy/1e3:.1f} us ({100*busy/wall:.1f}% busy), "
      f"gap median {gaps[len(gaps)//2]} ns p90 {gaps[int(len(gaps)*.9)]} ns, kernel median {sorted(dur)[len(dur)//2]} ns")
PY
cp /tmp/guild-prof.nsys-rep "$O/" 2>/dev/null || true
