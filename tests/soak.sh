#!/bin/sh
# A short soak of guild serve under faults (tests/soak.py): requests through the multi-process pipeline while its
# workers are killed (kill -9) at random moments; every request must complete with the text of an unfaulted run,
# and the coordinator must not crash. The long run (1000+ requests, 100+ kills) is the same script with larger
# numbers: SOAK_REQUESTS, SOAK_KILLS, SOAK_KILL_EVERY, SOAK_SECONDS, SOAK_JSON, SOAK_MODEL (default: a tiny
# model written here), SOAK_WORKERS (CPU workers, default 3).
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$G" "$B/guild-gpu-worker" "$B/guild-cpu-worker" "$MK"
need_python
T=$(mktemp -d) || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT INT TERM
M=${SOAK_MODEL:-$T/m.gguf}
if [ ! -f "$M" ]; then
    "$B/tools/guild-mkmodel" --arch qwen3moe --layers 3 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 \
        --experts 16 --experts-used 4 --expert-ff 256 --ctx 512 --type Q8_0 --seed 5 -o "$M" >"$T/mk.log" 2>&1 ||
        { cat "$T/mk.log"; echo "FAIL: guild-mkmodel"; exit 1; }
fi
run_logged 40 "$PY" "$S/tests/soak.py" --guild "$B/guild" --model "$M" --workdir "$T" \
    --requests "${SOAK_REQUESTS:-40}" --kills "${SOAK_KILLS:-8}" --kill-every "${SOAK_KILL_EVERY:-0.3}" --max-seconds "${SOAK_SECONDS:-120}" \
    ${SOAK_JSON:+--json "$SOAK_JSON"} -- --threads 1 --cpu-workers "${SOAK_WORKERS:-3}"
