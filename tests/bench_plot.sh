#!/bin/sh
# guild bench plot and guild bench run --svg: tests/bench_plot.py checks the SVGs (well-formed XML, every series,
# the limit lines, the legend, a context without a rate named in a note) and the errors.
set -u
B=${GUILD_BUILDDIR:-.}
S=${GUILD_SRCDIR:-.}
PY=${PYTHON:-python3}
if [ ! -x "$B/guild" ] || [ ! -x "$B/tools/guild-mkmodel" ]; then
    echo "SKIP: guild or guild-mkmodel is not built"
    exit 77
fi
if [ "$PY" = ":" ] || ! "$PY" -c 'import xml.etree.ElementTree' 2>/dev/null; then
    echo "SKIP: no Python 3"
    exit 77
fi
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
timeout 300 "$PY" "$S/tests/bench_plot.py" "$B" "$T"
