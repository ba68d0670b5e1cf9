#!/bin/sh
# guild serve's prefix cache end to end: tests/serve_prefix.py against tiny guild-mkmodel models (Python standard
# library only, with tests/serve_lib.py).
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK"
need_python
make_tmp
run_logged 30 timeout 300 "$PY" "$S/tests/serve_prefix.py" "$B" "$T"
