#!/bin/sh
# Guild's C quant references against the independent Python ones (tests/ref/check_quant.py).
. "$(dirname "$0")/py_env.sh"
bin="$GUILD_BUILDDIR/tests/ref/quant_dump"
if [ ! -x "$bin" ]; then
    echo "FAIL: $bin was not built"
    exit 1
fi
exec "$PYTHON" "$REFDIR/check_quant.py" "$bin"
