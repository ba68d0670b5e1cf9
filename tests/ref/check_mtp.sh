#!/bin/sh
# The multi-token-prediction layer of the CPU backend against the float64 reference (tests/ref/check_mtp.py).
. "$(dirname "$0")/py_env.sh"
bin="$GUILD_BUILDDIR/tests/ref/backend_logits"
mk="$GUILD_BUILDDIR/tools/guild-mkmodel"
for b in "$bin" "$mk"; do
    if [ ! -x "$b" ]; then
        echo "FAIL: $b was not built"
        exit 1
    fi
done
exec "$PYTHON" "$REFDIR/check_mtp.py" "$bin" "$mk"
