#!/usr/bin/env bash
# Session 29, logits (issue 18): one call. The greedy pick on the device (check_cuda_pick: the kernel = the scalar
# reference bit for bit, the backend's pick steps = its rows), then `guild bench sessions` at --gpu-mem 8G with 1, 4
# and 16 sessions, multi-process, the new build (greedy steps take each row's pick; no row crosses to the host) and
# the baseline (each row copied out of the step region and scanned by the coordinator) interleaved new, base, new.
# The coordinator's time per step is a step less the GPU worker's time in its request (the JSON's step_s less
# gpu_worker_forward_s). Usage: C=/tmp/c bash .carry-logits/logits.sh [SECONDS]
set -u
t0=$(date +%s)
budget=${1:-105}
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
m=/tmp/q30b.gguf
"$B/tools/guild-mkmodel" --shape qwen3-30b-a3b --fill pool --threads 14 -q -o $m > "$O/mkmodel.log" 2>&1 &
mk=$!
step 40 "check_cuda_pick" sh -c '"$0" > "'"$O/check_cuda_pick.log"'" 2>&1; st=$?; tail -n 4 "'"$O/check_cuda_pick.log"'"; exit $st' \
    "$B/tests/cuda/check_cuda_pick"
wait $mk
echo "rc=$? (guild-mkmodel)"
[ -f $m ] || { say "no model"; exit 1; }
sessions() { # TAG GUILD COMMIT
    step 35 "guild bench sessions ($1)" "$2" bench sessions -m $m --gpu-mem 8G --threads 14 \
        --sessions 1,4,16 --prompt 128 --gen 16 --repeat 3 --commit "$3" --json "$O/sessions-$1.json"
}
sessions new "$B/guild" "$commit"
sessions base "$C/base/guild" "$base_commit"
sessions new2 "$B/guild" "$commit"
for f in "$O"/sessions-*.json; do
    [ -f "$f" ] || continue
    python3 - "$f" << 'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["sizes"]:
    print(f"{sys.argv[1].split('/')[-1]}: {s['sessions']:2d} sessions: step {s['step_s'] * 1e3:.2f} ms, GPU worker "
          f"{s['gpu_worker_forward_s'] * 1e3:.2f} ms, coordinator {(s['step_s'] - s['gpu_worker_forward_s']) * 1e3:.2f} ms, "
          f"{s['decode_tok_s']:.1f} tok/s, {100 * s['fraction_of_limit']:.1f}% of its limit")
PYEOF
done
say "done"
