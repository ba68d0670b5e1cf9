#!/bin/sh
# guild serve --parallel end to end through the official openai npm client: tests/serve_parallel/parallel.mjs
# against a tiny guild-mkmodel model. The client (the version pinned in tests/serve_parallel/package-lock.json) is
# installed with npm ci into a cache outside the source and build trees; without node and npm, or when the npm
# registry cannot be reached, the test is skipped and says so (tools/quickstart.sh test installs node and npm).
set -u
. "$(dirname "$0")/test_lib.sh"
P="$S/tests/serve_parallel"
need_built "$MK"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "SKIP: node and npm are not installed (tools/quickstart.sh test installs them): the openai client test" \
        "of guild serve --parallel did not run"
    exit 77
fi
C=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/guild/serve-parallel-npm
mkdir -p "$C" || exit 1
# (re)install when the lock file changed; one test at a time installs (make check -j)
(
    flock 9
    if ! cmp -s "$P/package-lock.json" "$C/package-lock.json" || [ ! -d "$C/node_modules/openai" ]; then
        cp "$P/package.json" "$P/package-lock.json" "$C/" &&
            (cd "$C" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >"$C/npm.log" 2>&1)
    fi
) 9>"$C/.lock"
if [ ! -d "$C/node_modules/openai" ] || ! cmp -s "$P/package-lock.json" "$C/package-lock.json"; then
    echo "SKIP: npm ci could not install the openai client (is the npm registry reachable?):"
    tail -n 5 "$C/npm.log" 2>/dev/null
    rm -f "$C/package-lock.json"
    exit 77
fi
cp "$P/parallel.mjs" "$C/parallel.mjs" || exit 1
make_tmp
if ! "$B/tools/guild-mkmodel" --arch qwen3moe --layers 2 --embd 128 --heads 2 --kv-heads 1 --head-dim 64 \
    --experts 8 --experts-used 2 --expert-ff 128 --ctx 512 --vocab 796 --type Q8_0 --seed 5 -q -o "$T/m.gguf"; then
    echo "FAIL: guild-mkmodel"
    exit 1
fi
run_logged 30 timeout 300 node "$C/parallel.mjs" "$B/guild" "$T/m.gguf" "$T"
