#!/bin/sh
# guild serve end to end: tests/serve_api.py against a tiny guild-mkmodel model (Python standard library only).
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK" "$B/tests/gguf_edit"
need_python
make_tmp
run_logged 30 timeout 300 "$PY" "$S/tests/serve_api.py" "$B" "$T"
