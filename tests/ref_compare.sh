#!/bin/sh
# Guild's forward pass (guild run --logits-out) against the independent float64 reference, every architecture,
# F32/F16 and quantized shapes (tests/ref/ref_compare.py). REF_COMPARE_CASES=a,b limits the cases (used by the
# sanitizer build, where the full set would be slow).
. "$(dirname "$0")/ref/py_env.sh"
if [ -n "${REF_COMPARE_CASES:-}" ]; then
    exec "$PYTHON" "$REFDIR/ref_compare.py" --builddir "$GUILD_BUILDDIR" --cases "$REF_COMPARE_CASES"
fi
exec "$PYTHON" "$REFDIR/ref_compare.py" --builddir "$GUILD_BUILDDIR"
