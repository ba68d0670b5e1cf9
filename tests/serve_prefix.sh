#!/bin/sh
# guild serve's prefix cache end to end: tests/serve_prefix.py against tiny guild-mkmodel models (Python standard
# library only, with tests/serve_lib.py).
set -u
B=${GUILD_BUILDDIR:-.}
S=${GUILD_SRCDIR:-.}
PY=${PYTHON:-python3}
if [ ! -x "$B/tools/guild-mkmodel" ]; then
    echo "SKIP: guild-mkmodel is not built"
    exit 77
fi
if [ "$PY" = ":" ] || ! "$PY" -c 'import http.client' 2>/dev/null; then
    echo "SKIP: no Python 3"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
timeout 300 "$PY" "$S/tests/serve_prefix.py" "$B" "$T"
st=$?
if [ "$st" -ne 0 ]; then
    for f in "$T"/*.log; do
        [ -f "$f" ] && { echo "--- $f (last lines)"; tail -n 30 "$f"; }
    done
fi
exit "$st"
