#!/bin/sh
# docs/cli.md names only flags that exist (issue 13): each `## ` section of docs/cli.md is about one program (its
# heading names it in backticks: `guild run`, `guild-stager`, `guild-mkmodel`, ...), and every --flag written in
# the section must appear in that program's --help. A renamed or removed flag then fails here until the page
# follows. (`guild bench` covers its benchmarks and plot: a flag must be in one of their --help.)
set -u
B=${GUILD_BUILDDIR:-.}
top="${GUILD_SRCDIR:-$(dirname "$0")/..}"
doc=$top/docs/cli.md
if [ ! -f "$doc" ]; then
    echo "FAIL: $doc is missing"
    exit 1
fi
for f in "$B/guild" "$B/guild-gpu-worker" "$B/guild-cpu-worker" "$B/guild-stager" "$B/tools/guild-mkmodel"; do
    if [ ! -x "$f" ]; then
        echo "SKIP: $f is not built"
        exit 77
    fi
done
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

# help PROGRAM: the --help text of the program a heading names, on stdout.
help() {
    case "$1" in
    "guild bench")
        for b in experts bw run plot sessions pool route-predict trace; do "$B/guild" bench "$b" --help; done
        ;;
    guild | "guild "*) "$B/guild" ${1#guild} --help ;;
    guild-mkmodel) "$B/tools/guild-mkmodel" --help ;;
    guild-*) "$B/$1" --help ;;
    *) return 1 ;;
    esac
}

# Split the page into sections: T/sec.N holds section N's text, T/name.N its program.
awk -v dir="$T" '
    /^## / { n++; name = $0; sub(/^## `/, "", name); sub(/`.*$/, "", name); print name > (dir "/name." n); next }
    n { print > (dir "/sec." n) }
' "$doc"

fail=0
checked=0
for nf in "$T"/name.*; do
    n=${nf##*.}
    prog=$(cat "$nf")
    if ! help "$prog" >"$T/help" 2>&1; then
        echo "FAIL: docs/cli.md: section '$prog' does not name a program in backticks"
        fail=1
        continue
    fi
    [ -f "$T/sec.$n" ] || continue
    for flag in $(grep -oE -- '--[a-z][a-z0-9-]*' "$T/sec.$n" | sort -u); do
        checked=$((checked + 1))
        grep -qE -- "$flag([^a-z0-9-]|\$)" "$T/help" && continue
        echo "FAIL: docs/cli.md, section '$prog': $flag is not in its --help"
        fail=1
    done
done
if [ "$checked" -lt 50 ]; then
    echo "FAIL: only $checked flags found in docs/cli.md: is the extraction broken?"
    fail=1
fi
[ "$fail" -eq 0 ] && echo "ok: $checked flags named in docs/cli.md are in their programs' --help"
exit $fail
