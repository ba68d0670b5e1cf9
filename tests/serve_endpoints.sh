#!/bin/sh
# guild serve's /metrics, /tokenize, /detokenize and logprobs end to end: tests/serve_endpoints.py against a tiny
# guild-mkmodel model (Python standard library only).
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
timeout 300 "$PY" "$S/tests/serve_endpoints.py" "$B" "$T"
st=$?
if [ "$st" -ne 0 ]; then
    for f in "$T"/*.log; do
        [ -f "$f" ] && { echo "--- $f (last lines)"; tail -n 30 "$f"; }
    done
fi
exit "$st"
