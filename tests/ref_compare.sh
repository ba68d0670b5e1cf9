#!/bin/sh
# Guild's forward pass (guild run --logits-out) against the independent float64 reference, every architecture,
# F32/F16 and quantized shapes (tests/ref/ref_compare.py). Arguments are passed on (e.g. --cases a,b).
. "$(dirname "$0")/ref/py_env.sh"
exec "$PYTHON" "$REFDIR/ref_compare.py" --builddir "$GUILD_BUILDDIR" "$@"
