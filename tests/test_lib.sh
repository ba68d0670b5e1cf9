# tests/test_lib.sh — sourced by the shell tests after `set -u` (`. "$(dirname "$0")/test_lib.sh"`): B, the
# build directory (GUILD_BUILDDIR, else .); MK and G, guild-mkmodel and guild in it; need_built FILE... exits 77
# (SKIP) unless every FILE is an executable; fail MSG... says FAIL: MSG and exits 1 (a test may define its own).
B=${GUILD_BUILDDIR:-.}
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
