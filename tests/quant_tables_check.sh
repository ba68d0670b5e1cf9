#!/bin/sh
# core/quant's IQ tables: generated output unchanged, grids equal to an independent transcription
# (tests/quant_tables_check.py). Skips (77) only when no Python with NumPy exists.
: "${GUILD_SRCDIR:=$(cd "$(dirname "$0")/.." && pwd)}"
export PYTHONDONTWRITEBYTECODE=1
for py in "${PYTHON:-}" /usr/bin/python3 python3; do
    if [ -n "$py" ] && "$py" -c 'import numpy' >/dev/null 2>&1; then
        exec "$py" "$GUILD_SRCDIR/tests/quant_tables_check.py" "$GUILD_SRCDIR"
    fi
done
echo "SKIP: no Python with NumPy (install python3-numpy)"
exit 77
