#!/bin/sh
# Self-tests of the independent float64 reference (tests/ref/selftest_ref.py).
. "$(dirname "$0")/py_env.sh"
exec "$PYTHON" "$REFDIR/selftest_ref.py"
