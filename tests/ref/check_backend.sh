#!/bin/sh
# Guild's CPU backend against the float64 reference on reference-written models (tests/ref/check_backend.py).
. "$(dirname "$0")/py_env.sh"
bin="$GUILD_BUILDDIR/tests/ref/backend_logits"
if [ ! -x "$bin" ]; then
    echo "FAIL: $bin was not built"
    exit 1
fi
exec "$PYTHON" "$REFDIR/check_backend.py" "$bin"
