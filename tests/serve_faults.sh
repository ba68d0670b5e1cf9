#!/bin/sh
# guild serve under faults: tests/serve_faults.py (a planted NaN, a worker past the give-up limit, the port bound
# before the model loads) against tiny guild-mkmodel models (Python standard library only).
set -u
. "$(dirname "$0")/test_lib.sh"
need_built "$MK" "$B/tests/gguf_edit"
need_python
make_tmp
"$B/tools/guild-mkmodel" --arch qwen2moe --layers 2 --embd 256 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 \
    --experts-used 2 --expert-ff 256 --shared-ff 256 --ctx 256 --type F32 --seed 3 -o "$T/m.gguf" >"$T/mk.log" 2>&1 ||
    { cat "$T/mk.log"; echo "FAIL: guild-mkmodel"; exit 1; }
# token 100's embedding row (256 wide), element 3
"$B/tests/gguf_edit" "$T/m.gguf" "$T/nan.gguf" --set-nan token_embd.weight:25603 || { echo "FAIL: gguf_edit"; exit 1; }
run_logged 30 timeout 300 "$PY" "$S/tests/serve_faults.py" "$B" "$T" "$T/m.gguf" "$T/nan.gguf"
