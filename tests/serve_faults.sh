#!/bin/sh
# guild serve under faults: tests/serve_faults.py (a planted NaN, a worker past the give-up limit, the port bound
# before the model loads) against tiny guild-mkmodel models (Python standard library only).
set -u
B=${GUILD_BUILDDIR:-.}
S=${GUILD_SRCDIR:-.}
PY=${PYTHON:-python3}
if [ ! -x "$B/tools/guild-mkmodel" ] || [ ! -x "$B/tests/gguf_edit" ]; then
    echo "SKIP: guild-mkmodel or tests/gguf_edit is not built"
    exit 77
fi
if [ "$PY" = ":" ] || ! "$PY" -c 'import http.client' 2>/dev/null; then
    echo "SKIP: no Python 3"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
"$B/tools/guild-mkmodel" --arch qwen2moe --layers 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 \
    --experts-used 2 --expert-ff 256 --shared-ff 256 --ctx 256 --type F32 --seed 3 -o "$T/m.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; echo "FAIL: guild-mkmodel"; exit 1; }
# token 100's embedding row (256 wide), element 3
"$B/tests/gguf_edit" "$T/m.gguf" "$T/nan.gguf" --set-nan token_embd.weight:25603 || { echo "FAIL: gguf_edit"; exit 1; }
timeout 300 "$PY" "$S/tests/serve_faults.py" "$B" "$T" "$T/m.gguf" "$T/nan.gguf"
st=$?
if [ "$st" -ne 0 ]; then
    for f in "$T"/*.log; do
        [ -f "$f" ] && { echo "--- $f (last lines)"; tail -n 30 "$f"; }
    done
fi
exit "$st"
