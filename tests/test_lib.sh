# tests/test_lib.sh — sourced by the shell tests after `set -u` (`. "$(dirname "$0")/test_lib.sh"`): B, the
# build directory (GUILD_BUILDDIR, else .); S, the source directory (GUILD_SRCDIR, else .); PY, the Python 3
# configure found; MK and G, guild-mkmodel and guild in B; need_built FILE... exits 77 (SKIP) unless every FILE is
# an executable; need_python skips without a Python 3; make_tmp makes T, a directory removed on exit; run_logged N
# CMD... runs CMD and, when it fails, prints the last N lines of every T/*.log (the servers' and workers' logs)
# and exits with CMD's status; fail MSG... says FAIL: MSG and exits 1 (a test may define its own).
B=${GUILD_BUILDDIR:-.}
S=${GUILD_SRCDIR:-.}
PY=${PYTHON:-python3}
MK=$B/tools/guild-mkmodel
G=$B/guild

need_built() {
    for f in "$@"; do
        if [ ! -x "$f" ]; then
            echo "SKIP: $f is not built"
            exit 77
        fi
    done
}

fail() {
    echo "FAIL: $*"
    exit 1
}

need_python() {
    if [ "$PY" = ":" ] || ! "$PY" -c 'import http.client' 2>/dev/null; then
        echo "SKIP: no Python 3"
        exit 77
    fi
}

make_tmp() {
    T=$(mktemp -d) || exit 1
    trap 'rm -rf "$T"' EXIT INT TERM
}

run_logged() {
    lines=$1
    shift
    "$@"
    st=$?
    if [ "$st" -ne 0 ]; then
        for f in "$T"/*.log; do
            [ -f "$f" ] && { echo "--- $f (last lines)"; tail -n "$lines" "$f"; }
        done
    fi
    exit "$st"
}
